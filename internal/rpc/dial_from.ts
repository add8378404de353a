// A node process dials from its own address, as a VM does (issue 46).
//
// Node processes share their host: each serves on a loopback address of its
// own (127.0.0.N), but the kernel gives every connection to a loopback
// address the source 127.0.0.1 unless the socket is bound first. Then a
// server saw one source for all of them, and its per-source bounds held a
// hundred nodes and the owner to one address's share. Once the node process
// calls dialFromOwnAddress, every TCP connection it opens to a loopback
// address (gRPC's, through grpc-js's net.connect: the curator's, node
// management's, etcd's clients) is bound to the node's address first, so a
// server counts each node as itself, as it does VMs. A VM never calls it:
// its kernel picks its one address.
//
// It replaces net.connect (and its other name, createConnection) in this
// process, since grpc-js offers no option for a connection's local address;
// an explicit localAddress, a unix socket, or a target that is not on
// loopback are left as they were.

import net from "node:net";
import { isLoopback } from "./address.ts";

let installed: string | undefined;

export class DialFromError extends Error {
  override name = "DialFromError";
}

/** The address this process dials loopback targets from, if dialFromOwnAddress was called. */
export function dialingFrom(): string | undefined {
  return installed;
}

/** From now on, TCP connections this process opens to loopback addresses are made from `address` (a loopback address of this host). */
export function dialFromOwnAddress(address: string): void {
  if (net.isIP(address) === 0 || !isLoopback(address))
    throw new DialFromError(`${JSON.stringify(address.slice(0, 60))} is not a loopback address: only a node process on a shared host dials from an address of its own`);
  if (installed !== undefined) {
    if (installed === address) return;
    throw new DialFromError(`this process dials from ${installed} already, not ${address}`);
  }
  installed = address;
  const connect = net.connect;
  const bound = function (this: unknown, ...args: unknown[]) {
    const [first] = args;
    if (first !== null && typeof first === "object" && !("path" in first && (first as net.IpcNetConnectOpts).path)) {
      const options = first as net.TcpNetConnectOpts;
      if (options.localAddress === undefined && typeof options.host === "string" && net.isIP(options.host) !== 0 && isLoopback(options.host)) {
        args[0] = { ...options, localAddress: address };
      }
    }
    return (connect as (...a: unknown[]) => net.Socket).apply(this, args);
  } as typeof net.connect;
  net.connect = bound;
  net.createConnection = bound;
}
