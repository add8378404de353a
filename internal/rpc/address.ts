// How every client and server of the system writes a network address.

/** "10.0.0.2:7835", "[fd00::2]:7835": IPv6 hosts in brackets, as URLs and gRPC targets need. */
export function hostPort(host: string, port: number): string {
  return host.includes(":") ? `[${host}]:${port}` : `${host}:${port}`;
}
