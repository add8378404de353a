// Listening with bounds: every gRPC server of the node is created and bound
// here, so that no server accepts unbounded connections, handshakes,
// streams or idle peers.
//
//   TCP connect ─▶ over MAX_CONNECTIONS or MAX_PENDING_HANDSHAKES? ─▶ dropped
//               ─▶ TLS handshake, TLS_HANDSHAKE_TIMEOUT_MS at most ─▶ HTTP/2 session
//               ─▶ at most MAX_CONCURRENT_STREAMS calls at once per connection
//               ─▶ keepalive pings: a peer that stops answering is dropped

import { Server, type ServerOptions } from "@grpc/grpc-js";
import type { RotatingServerCredentials } from "./tls.ts";

/** Open connections per server, authenticated or not. */
export const MAX_CONNECTIONS = 2048;
/** Connections still in their TLS handshake, per server. */
export const MAX_PENDING_HANDSHAKES = 256;
/** Concurrent calls (streams) on one connection. */
export const MAX_CONCURRENT_STREAMS = 1024;
/** The server pings an idle connection this often, and drops it if the ping is not answered in KEEPALIVE_TIMEOUT_MS. */
export const KEEPALIVE_TIME_MS = 30_000;
export const KEEPALIVE_TIMEOUT_MS = 10_000;
/** Largest message a server accepts (requests are checked again, more tightly, per method). */
export const MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;

/** A gRPC server with the node's limits. */
export function createServer(): Server {
  const options: ServerOptions = {
    "grpc.max_receive_message_length": MAX_RECEIVE_MESSAGE_BYTES,
    "grpc.max_concurrent_streams": MAX_CONCURRENT_STREAMS,
    "grpc.keepalive_time_ms": KEEPALIVE_TIME_MS,
    "grpc.keepalive_timeout_ms": KEEPALIVE_TIMEOUT_MS,
  };
  return new Server(options);
}

export interface ListenLimits {
  maxConnections: number;
  maxPendingHandshakes: number;
}

/** What a listener refused, for logs and tests. */
export interface ListenerCounters {
  open: number;
  handshaking: number;
  refused: number;
}

type Socket = { destroy(): void; once(event: string, listener: () => void): void };
type Http2Listener = { on(event: string, listener: (socket: Socket) => void): void; prependListener(event: string, listener: (socket: Socket) => void): void };

/**
 * Binds `server` on `address` ("host:port", IPv6 hosts in brackets) and
 * bounds its connections. Returns the port and live counters.
 *
 * grpc-js exposes no connection hooks, so this reaches the HTTP/2 servers
 * it created through its `http2Servers` map. The grpc-js version is pinned,
 * and listener.test.ts fails loudly if that field goes away.
 */
export async function listen(
  server: Server,
  address: string,
  credentials: RotatingServerCredentials,
  limits: ListenLimits = { maxConnections: MAX_CONNECTIONS, maxPendingHandshakes: MAX_PENDING_HANDSHAKES },
): Promise<{ port: number; counters: ListenerCounters }> {
  const before = new Set(http2ServersOf(server));
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync(address, credentials, (err, bound) => (err ? reject(err) : resolve(bound))),
  );
  const counters: ListenerCounters = { open: 0, handshaking: 0, refused: 0 };
  const added = http2ServersOf(server).filter((s) => !before.has(s));
  if (added.length === 0) throw new Error("cannot find the HTTP/2 servers grpc-js created (did the grpc-js version change?)");
  for (const listener of added) bound(listener as Http2Listener, limits, counters);
  return { port, counters };
}

function http2ServersOf(server: Server): unknown[] {
  const map = (server as unknown as { http2Servers?: Map<unknown, unknown> }).http2Servers;
  if (!(map instanceof Map)) throw new Error("grpc-js Server has no http2Servers map (did the grpc-js version change?)");
  return [...map.keys()];
}

function bound(listener: Http2Listener, limits: ListenLimits, counters: ListenerCounters): void {
  const handshaking = new WeakSet<Socket>();
  // Runs before grpc-js's own listeners, so a refused socket never reaches them.
  listener.prependListener("connection", (socket) => {
    if (counters.open >= limits.maxConnections || counters.handshaking >= limits.maxPendingHandshakes) {
      counters.refused++;
      socket.destroy();
      return;
    }
    counters.open++;
    counters.handshaking++;
    handshaking.add(socket);
    socket.once("close", () => {
      counters.open--;
      if (handshaking.delete(socket)) counters.handshaking--;
    });
  });
  // bun hands the same TLS socket to "connection" and "secureConnection".
  listener.on("secureConnection", (socket) => {
    if (handshaking.delete(socket)) counters.handshaking--;
  });
}
