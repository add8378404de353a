// How every client and server of the system writes a network address.

/** "10.0.0.2:7835", "[fd00::2]:7835": IPv6 hosts in brackets, as URLs and gRPC targets need. */
export function hostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}

/** Whether an address is a loopback one (127.0.0.0/8, ::1): no other machine can reach it. */
export function isLoopback(address: string): boolean {
  return address.startsWith("127.") || address === "::1";
}

/** A socket's remote address as the system names it: an IPv4 address mapped into IPv6 ("::ffff:10.0.0.2") as IPv4. */
export function sourceAddress(remote: string | undefined): string | undefined {
  return remote?.replace(/^::ffff:(\d+\.\d+\.\d+\.\d+)$/, "$1");
}
