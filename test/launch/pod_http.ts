// HTTP from inside a pod of a launched cluster, for the e2e and the benches.
// The pods run nodecore.local/busybox:1 (busybox, preloaded on every worker).

/**
 * An HTTP/1.0 GET of `http://host:port/` with busybox's nc, as a shell
 * command line: Debian's static busybox wget dies of SIGSEGV in a container
 * without /etc (glibc's NSS), nc does not. Prints the whole response.
 */
export function httpGetCommand(host: string, port: number): string {
  return `printf 'GET / HTTP/1.0\\r\\nHost: ${host}\\r\\n\\r\\n' | busybox nc -w 5 ${host} ${port}`;
}

/** The body of an HTTP response; throws, naming `what`, unless it is a 200. */
export function httpBody(response: string, what: string): string {
  const split = response.indexOf("\r\n\r\n");
  if (!/^HTTP\/1\.[01] 200 /.test(response) || split < 0) throw new Error(`${what}: not a 200 answer: ${JSON.stringify(response.slice(0, 120))}`);
  return response.slice(split + 4).trim();
}
