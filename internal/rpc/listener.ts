// Listening with bounds: every gRPC server of the node is created and bound
// here, so that no server accepts unbounded connections, handshakes,
// streams or idle peers.
//
//   TCP connect ─▶ over a bound? ─▶ dropped at once
//                    - MAX_CONNECTIONS open, MAX_PENDING_HANDSHAKES handshaking (all sources)
//                    - MAX_CONNECTIONS_PER_SOURCE, MAX_PENDING_HANDSHAKES_PER_SOURCE (one address;
//                      a known source may take every connection and handshake the server has)
//                    - a source never seen to finish a handshake gets only the pending
//                      handshakes outside RESERVED_SHARE_FOR_KNOWN_SOURCES
//               ─▶ its ClientHello within FIRST_FLIGHT_TIMEOUT_MS, or dropped: a client
//                  sends it as soon as it connects, so a connection that says
//                  nothing frees its slot long before the handshake deadline
//                  (a known source is spared this check: see bound())
//               ─▶ TLS handshake, TLS_HANDSHAKE_TIMEOUT_MS at most ─▶ HTTP/2 session
//                  (these three deadlines give a known source back the time
//                  this process did not run: deadline.ts)
//               ─▶ a call that passes its policy (or a plain HTTPS request answered)
//                  within FIRST_CALL_TIMEOUT_MS, or the connection is dropped: one that
//                  only answers pings, or trickles a request's header, holds nothing
//                  (a call that arrived but is not judged yet gets the deadline
//                  once more, ASKED_EXTENSIONS_VOUCHED times under a certificate
//                  the cluster CA issued, which also gets the time back this
//                  process did not run: ListenLimits.vouch)
//               ─▶ at most MAX_CONCURRENT_STREAMS calls at once per connection
//               ─▶ TCP keepalive, judged by the kernel: a peer whose machine stops
//                  answering is dropped (not grpc-js's pings, whose timer judged
//                  a peer while this process was not running: KEEPALIVE_TIME_MS)
//               ─▶ no call for CONNECTION_IDLE_MS: closed gracefully (GOAWAY); an
//                  HTTP/1.1 connection is closed after its one request
//
// Every server of the process counts against MAX_CONNECTIONS_PER_PROCESS
// too, so that all of them together stay below the file descriptors PID 1
// gives itself (NODE_FILE_LIMIT, cmd/init), with FILE_RESERVE left for the
// node's own files, clients and pipes.
//
// A server may also answer plain HTTPS requests (the node's metrics) beside
// gRPC on the same port: HTTP/2 streams that are not gRPC, and HTTP/1.1
// requests from clients that offer no h2, go to an HttpHandler, on the same
// bounded connections, at most MAX_HTTP_ANSWERS_PER_CONNECTION and
// MAX_HTTP_ANSWERS_IN_FLIGHT at once (beyond: 503 before the handler runs).
//
// So one address that floods a port with idle connections holds at most
// MAX_PENDING_HANDSHAKES_PER_SOURCE of its handshake slots, and the nodes
// and the owner, whose calls have been let in before (a handshake alone,
// which anyone can finish, earns nothing), keep a share of their own, of
// the handshakes and of the connections (RESERVED_SHARE_FOR_KNOWN_SOURCES
// of each). A source is known to the whole process, not to one server: a
// call let in on the curator's port counts on the node management port too.

import { ChannelCredentials, Server, ServerCredentials, type ServerOptions } from "@grpc/grpc-js";
import { chmodSync, mkdirSync, rmSync } from "node:fs";
import { dirname } from "node:path";
import type { TLSSocket } from "node:tls";
import { sourceAddress } from "./address.ts";
import { peerDeadline } from "./deadline.ts";
import type { X509Certificate } from "node:crypto";
import { authenticate } from "./peer.ts";
import { peerCertificateOf, TLS_HANDSHAKE_TIMEOUT_MS, type RotatingServerCredentials } from "./tls.ts";

/** Open connections per server, authenticated or not. */
export const MAX_CONNECTIONS = 2048;
/** Connections still in their TLS handshake, per server. */
export const MAX_PENDING_HANDSHAKES = 256;
/** Open connections from one address (a node keeps a few; a node process dials from its own loopback address, dial_from.ts). */
export const MAX_CONNECTIONS_PER_SOURCE = 512;
/** How long a new connection may take to send its whole ClientHello (the first thing a TLS client says). */
export const FIRST_FLIGHT_TIMEOUT_MS = 3_000;
/** Connections from one address still in their TLS handshake. */
export const MAX_PENDING_HANDSHAKES_PER_SOURCE = 32;
/** The share of pending handshakes, and of connections, that only known sources (an owner's or a node's call let in from there before) may take. */
export const RESERVED_SHARE_FOR_KNOWN_SOURCES = 0.25;
/** How many known sources are remembered (the least recent go first). */
const KNOWN_SOURCES_REMEMBERED = 4096;
/** How long after its handshake a connection may go without a call let in (or an HTTPS request answered). */
export const FIRST_CALL_TIMEOUT_MS = 10_000;
/**
 * How many more FIRST_CALL_TIMEOUT_MS a call that arrived but is not judged
 * yet gets on a connection the cluster CA's certificate vouches for (a
 * stranger's gets one): the owner and the nodes wait as long as their own
 * call deadlines, not the server's slowest minute.
 */
export const ASKED_EXTENSIONS_VOUCHED = 5;
/** A connection with no call for this long is closed gracefully (grpc-js max_connection_idle_ms). */
export const CONNECTION_IDLE_MS = 5 * 60_000;
/** How long a known source (an owner's or a node's call let in from there before) may take to finish a TLS handshake. */
export const KNOWN_SOURCE_HANDSHAKE_TIMEOUT_MS = 30_000;
/** Open connections of every server in this process together. */
export const MAX_CONNECTIONS_PER_PROCESS = 8192;
/** The file descriptors PID 1 gives itself (setrlimit RLIMIT_NOFILE). */
export const NODE_FILE_LIMIT = 65_536;
/** What stays for the node's own files, clients and pipes when every server is full. */
export const FILE_RESERVE = NODE_FILE_LIMIT - MAX_CONNECTIONS_PER_PROCESS;
/** Concurrent calls (streams) on one connection. */
export const MAX_CONCURRENT_STREAMS = 1024;
/**
 * A connection with nothing sent or received for this long is probed by
 * the kernel (TCP keepalive; bun's setKeepAlive sends 10 probes a second
 * apart), and closed if the peer's machine does not answer them.
 *
 * The kernel judges, not a timer in this process: grpc-js's own keepalive
 * sends an HTTP/2 ping and destroys the session when its timer fires first,
 * and a timer runs before the loop reads its sockets. A node whose process
 * had not run for longer than that timeout (a starved CPU under emulation)
 * destroyed connections whose ping answers were waiting in the socket, and
 * the calls on them failed as "the connection dropped during the call"
 * (a launched 3-VM cluster on a slow day: the owner's ctl cluster info,
 * every try for 5 minutes, and the nodes' heartbeats). The kernel answers
 * and judges probes whether this process runs or not.
 */
export const KEEPALIVE_TIME_MS = 30_000;
/** Largest message a server accepts (requests are checked again, more tightly, per method). */
export const MAX_RECEIVE_MESSAGE_BYTES = 4 * 1024 * 1024;

/** A gRPC server with the node's limits. */
export function createServer(): Server {
  const options: ServerOptions = {
    "grpc.max_receive_message_length": MAX_RECEIVE_MESSAGE_BYTES,
    "grpc.max_concurrent_streams": MAX_CONCURRENT_STREAMS,
    // No "grpc.keepalive_time_ms": grpc-js's pings are judged by a timer
    // of this process (KEEPALIVE_TIME_MS says why); the kernel's TCP
    // keepalive, set on each connection in listen(), judges instead.
    "grpc.max_connection_idle_ms": CONNECTION_IDLE_MS,
  };
  return new Server(options);
}

export interface ListenLimits {
  maxConnections: number;
  maxPendingHandshakes: number;
  maxConnectionsPerSource?: number;
  maxPendingHandshakesPerSource?: number;
  reservedForKnownSources?: number;
  firstFlightTimeoutMs?: number;
  handshakeTimeoutMs?: number;
  knownSourceHandshakeTimeoutMs?: number;
  firstCallTimeoutMs?: number;
  /**
   * Whether a client's certificate vouches for it (vouchedUnder: one the
   * cluster CA issued). A vouched connection's first-call deadline gives
   * back the time this process did not run, as a known source's does, from
   * its first connection on: the owner's first call after ctl
   * takeownership's escrow comes from an address no call was let in from
   * yet.
   */
  vouch?: (certificate: X509Certificate | undefined) => boolean;
}

/** What a listener refused, for logs and tests. */
export interface ListenerCounters {
  open: number;
  handshaking: number;
  refused: number;
  /** Connections dropped for sending no ClientHello in time. */
  silent: number;
  /** Connections dropped for not finishing the TLS handshake in time. */
  unfinished: number;
  /** Connections dropped for making no call (let in) within FIRST_CALL_TIMEOUT_MS of their handshake. */
  idle: number;
}

type Socket = {
  destroy(): void;
  setKeepAlive?(enable: boolean, initialDelayMs: number): unknown;
  once(event: string, listener: () => void): void;
  remoteAddress?: string | undefined;
  remotePort?: number | undefined;
  _handle?: { getCipher?: () => unknown } | null;
};

/** The bounded connections of every server in this process, by their client's address and port. */
const connections = new Map<string, { used: boolean; asked: boolean; known: () => void }>();
/** Open connections of every server in this process. */
let processConnections = 0;
type DroppedSource = "known" | "stranger";
/** Why connections were dropped by every server of this process, and whether their source was known, by "<reason> <source>". */
const drops = new Map<string, { reason: string; source: DroppedSource; count: number }>();
function dropped(reason: string, source: DroppedSource): void {
  const key = `${reason} ${source}`;
  const entry = drops.get(key) ?? { reason, source, count: 0 };
  entry.count++;
  drops.set(key, entry);
}

/**
 * The connections every server of this process dropped so far, by reason
 * (refused-<the bound that was full>, silent: no ClientHello in time,
 * idle: no call in time) and by whether their source was known: for the
 * node's metrics, so that a storm's lost calls can be told apart.
 */
export function connectionDrops(): { reason: string; source: DroppedSource; count: number }[] {
  return [...drops.values()].map((entry) => ({ ...entry }));
}

/**
 * Known sources, for every server in this process: an address whose owner's
 * or node's call was let in on any of them is known on all of them (the
 * owner who has called the curator may scrape the node's metrics while
 * strangers fill its port). Insertion order is recency: a source is
 * re-inserted at each such call.
 */
const known = new Map<string, true>();
function remember(source: string): void {
  known.delete(source);
  known.set(source, true);
  if (known.size > KNOWN_SOURCES_REMEMBERED) known.delete(known.keys().next().value!);
}

const connectionKey = (socket: { remoteAddress?: string | undefined; remotePort?: number | undefined }) => `${socket.remoteAddress ?? ""} ${socket.remotePort ?? 0}`;

/**
 * Tells the listener that a call on `socket`'s connection was let in (it
 * passed its policy: rpc's contextOf), or that a plain HTTPS request there
 * was answered: the connection has earned its keep past
 * FIRST_CALL_TIMEOUT_MS. A call from the owner or a node (`knownSource`)
 * also makes its address a known source, which may use the handshakes
 * kept for known sources.
 */
export function connectionUsed(socket: { remoteAddress?: string | undefined; remotePort?: number | undefined } | undefined, knownSource: boolean): void {
  if (!socket) return;
  const entry = connections.get(connectionKey(socket));
  if (!entry) return;
  entry.used = true;
  if (knownSource) entry.known();
}

/**
 * Whether the server has read the connection's ClientHello: bun's TLS
 * socket counts no bytes before the handshake ends, but it names a cipher
 * once the ClientHello is in. undefined: the runtime cannot say
 * (listener.test.ts fails loudly then), and the connection is left to the
 * handshake deadline.
 */
export function heardClientHello(socket: Socket): boolean | undefined {
  const handle = socket._handle;
  if (!handle || typeof handle.getCipher !== "function") return undefined;
  // Before the ClientHello, bun answers with a cipher whose name is null.
  const cipher = handle.getCipher() as { name?: string | null } | null | undefined;
  return Boolean(cipher?.name);
}
type Http2Listener = {
  on(event: string, listener: (...args: never[]) => void): void;
  prependListener(event: "connection", listener: (socket: Socket) => void): void;
  prependListener(event: "stream", listener: (stream: { session?: { socket?: { remoteAddress?: string; remotePort?: number } } }) => void): void;
  listeners(event: string): ((...args: unknown[]) => void)[];
  removeAllListeners(event: string): void;
};

/** A plain HTTPS request to a gRPC port (listen's `http`). */
export interface HttpRequest {
  method: string;
  /** The request target: path and query. */
  path: string;
  /** The connection: its client certificate says who asks. */
  socket: TLSSocket;
}

export interface HttpAnswer {
  status: number;
  contentType: string;
  body: string;
}

export type HttpHandler = (request: HttpRequest) => Promise<HttpAnswer>;

/** The longest a handler may take before the request is answered 503. */
const HTTP_ANSWER_TIMEOUT_MS = 30_000;
/** Plain HTTPS requests being answered at once, per server: more are answered 503 before anything else is done. */
export const MAX_HTTP_ANSWERS_IN_FLIGHT = 32;
/** ... and per connection (HTTP/2 multiplexes; HTTP/1.1 may pipeline). */
export const MAX_HTTP_ANSWERS_PER_CONNECTION = 2;

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
  http?: HttpHandler,
): Promise<{ port: number; counters: ListenerCounters }> {
  const before = new Set(http2ServersOf(server));
  const port = await new Promise<number>((resolve, reject) => server.bindAsync(address, credentials, (err, bound) => (err ? reject(err) : resolve(bound))));
  const counters: ListenerCounters = { open: 0, handshaking: 0, refused: 0, silent: 0, unfinished: 0, idle: 0 };
  const added = http2ServersOf(server).filter((s) => !before.has(s));
  if (added.length === 0) throw new Error("cannot find the HTTP/2 servers grpc-js created (did the grpc-js version change?)");
  for (const listener of added) {
    bound(listener as Http2Listener, limits, counters);
    if (http) routeHttp(listener as Http2Listener, http);
  }
  return { port, counters };
}

/**
 * Sends what is not gRPC to `http`. HTTP/1.1 requests arrive as "request"
 * events (the credentials must allow HTTP/1: serverCredentials's
 * allowHttp1); adding that listener makes the HTTP/2 server also turn
 * every stream into a compatibility request, which would answer gRPC calls
 * too. So the stream listeners are replaced by one that hands gRPC streams
 * to grpc-js's own listeners (those there before), and the rest to `http`.
 */
function routeHttp(listener: Http2Listener, http: HttpHandler): void {
  const grpc = listener.listeners("stream");
  type Stream = { respond(headers: Record<string, string | number>): void; end(body?: string): void; session?: { socket?: unknown }; destroyed?: boolean };
  type Http1Request = { method?: string; url?: string; httpVersion: string; socket: unknown };
  type Http1Response = { writeHead(status: number, headers: Record<string, string | number>): void; end(body?: string): void };
  // Bounded before the handler runs: each answer may be a whole scrape's
  // text in a socket's buffers, so many readers at once would hold many.
  let inFlight = 0;
  const perConnection = new WeakMap<object, number>();
  const answer = async (request: HttpRequest, send: (answer: HttpAnswer) => void) => {
    const connection = (request.socket as object | undefined) ?? {};
    const mine = perConnection.get(connection) ?? 0;
    if (inFlight >= MAX_HTTP_ANSWERS_IN_FLIGHT || mine >= MAX_HTTP_ANSWERS_PER_CONNECTION) {
      try {
        send({ status: 503, contentType: "text/plain", body: "busy: too many requests at once; try again\n" });
      } catch {
        // The client went away.
      }
      return;
    }
    inFlight++;
    perConnection.set(connection, mine + 1);
    try {
      await answerNow(request, send);
    } finally {
      inFlight--;
      perConnection.set(connection, (perConnection.get(connection) ?? 1) - 1);
    }
  };
  const answerNow = async (request: HttpRequest, send: (answer: HttpAnswer) => void) => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<HttpAnswer>((resolve) => {
      timer = setTimeout(() => resolve({ status: 503, contentType: "text/plain", body: "the answer took too long\n" }), HTTP_ANSWER_TIMEOUT_MS);
    });
    let result: HttpAnswer;
    try {
      result = await Promise.race([http(request), late]);
    } catch (err) {
      result = { status: 500, contentType: "text/plain", body: `could not answer: ${(err as Error)?.message ?? String(err)}\n` };
    } finally {
      clearTimeout(timer);
    }
    // Answered, not refused: the connection made a call worth keeping it for.
    if (result.status < 400) connectionUsed(request.socket, false);
    try {
      send(result);
    } catch {
      // The client went away.
    }
  };
  listener.on("request", ((request: Http1Request, response: Http1Response) => {
    if (request.httpVersion.startsWith("2")) return;
    void answer({ method: request.method ?? "GET", path: request.url ?? "/", socket: request.socket as TLSSocket }, (a) => {
      // One request per HTTP/1.1 connection: nothing is held between requests.
      response.writeHead(a.status, { "content-type": a.contentType, "content-length": Buffer.byteLength(a.body), connection: "close" });
      response.end(a.body);
    });
  }) as never);
  listener.removeAllListeners("stream");
  listener.on("stream", ((stream: Stream, headers: Record<string, string | undefined>, ...rest: unknown[]) => {
    if ((headers["content-type"] ?? "").startsWith("application/grpc")) {
      for (const serve of grpc) serve.call(listener, stream, headers, ...rest);
      return;
    }
    void answer({ method: headers[":method"] ?? "GET", path: headers[":path"] ?? "/", socket: stream.session?.socket as TLSSocket }, (a) => {
      if (stream.destroyed) return;
      stream.respond({ ":status": a.status, "content-type": a.contentType });
      stream.end(a.body);
    });
  }) as never);
}

function http2ServersOf(server: Server): unknown[] {
  const map = (server as unknown as { http2Servers?: Map<unknown, unknown> }).http2Servers;
  if (!(map instanceof Map)) throw new Error("grpc-js Server has no http2Servers map (did the grpc-js version change?)");
  return [...map.keys()];
}

/** Per address: open connections and pending handshakes. */
interface SourceCount {
  open: number;
  handshaking: number;
}

function bound(listener: Http2Listener, limits: ListenLimits, counters: ListenerCounters): void {
  const perSource = {
    connections: limits.maxConnectionsPerSource ?? MAX_CONNECTIONS_PER_SOURCE,
    handshakes: limits.maxPendingHandshakesPerSource ?? MAX_PENDING_HANDSHAKES_PER_SOURCE,
  };
  const firstFlightMs = limits.firstFlightTimeoutMs ?? FIRST_FLIGHT_TIMEOUT_MS;
  const firstCallMs = limits.firstCallTimeoutMs ?? FIRST_CALL_TIMEOUT_MS;
  const handshakeMs = limits.handshakeTimeoutMs ?? TLS_HANDSHAKE_TIMEOUT_MS;
  const knownHandshakeMs = limits.knownSourceHandshakeTimeoutMs ?? KNOWN_SOURCE_HANDSHAKE_TIMEOUT_MS;
  const reserved = Math.min(limits.reservedForKnownSources ?? Math.floor(limits.maxPendingHandshakes * RESERVED_SHARE_FOR_KNOWN_SOURCES), limits.maxPendingHandshakes);
  const sources = new Map<string, SourceCount>();
  // Each socket in its handshake, with its source and that source's counts.
  const handshaking = new Map<Socket, { source: string; count: SourceCount }>();
  const finished = (socket: Socket) => {
    const entry = handshaking.get(socket);
    if (!entry) return;
    handshaking.delete(socket);
    entry.count.handshaking--;
    counters.handshaking--;
  };
  // Runs before grpc-js's own listeners, so a refused socket never reaches them.
  listener.prependListener("connection", (socket) => {
    const source = sourceAddress(socket.remoteAddress) ?? "";
    const count = sources.get(source) ?? { open: 0, handshaking: 0 };
    const isKnown = known.has(source);
    const handshakeRoom = isKnown ? limits.maxPendingHandshakes : limits.maxPendingHandshakes - reserved;
    // Connections too: a share is kept for known sources, so that strangers who fill the rest keep no node or owner out.
    const connectionRoom = isKnown ? limits.maxConnections : limits.maxConnections - Math.floor(limits.maxConnections * RESERVED_SHARE_FOR_KNOWN_SOURCES);
    // A known source is held to the server's bounds, not to one address's
    // shares of connections and handshakes: many nodes may dial from one
    // address (nodes behind one NAT; the owner's ctl beside node processes
    // on one host, which dial from their own addresses), and a
    // storm of them must not take the owner's handshakes from that address
    // (issue 46).
    const sourceHandshakes = isKnown ? limits.maxPendingHandshakes : perSource.handshakes;
    const sourceConnections = isKnown ? limits.maxConnections : perSource.connections;
    // The first bound that is full names the refusal.
    const full = (
      [
        ["process-connections", processConnections >= MAX_CONNECTIONS_PER_PROCESS],
        ["server-connections", counters.open >= connectionRoom],
        ["server-handshakes", counters.handshaking >= handshakeRoom],
        ["source-connections", count.open >= sourceConnections],
        ["source-handshakes", count.handshaking >= sourceHandshakes],
      ] as const
    ).find(([, over]) => over)?.[0];
    if (full) {
      counters.refused++;
      dropped(`refused-${full}`, isKnown ? "known" : "stranger");
      socket.destroy();
      return;
    }
    // Liveness is the kernel's to judge (KEEPALIVE_TIME_MS).
    socket.setKeepAlive?.(true, KEEPALIVE_TIME_MS);
    sources.set(source, count);
    count.open++;
    count.handshaking++;
    counters.open++;
    counters.handshaking++;
    processConnections++;
    handshaking.set(socket, { source, count });
    // Every deadline is judged after the event loop's next poll, and a known
    // source's gives back the time this process did not run (deadline.ts):
    // a loop that was away past it reads what has arrived before it judges
    // the connection. A stranger's does not: a flood must not buy itself
    // time by slowing the node.
    // The first flight is not checked for a known source: on a starved CPU
    // the check judged the owner's and nodes' connections silent although
    // their ClientHello had been sent (a 100-node storm: 15 such drops, all
    // from the known source, in nodecore_rpc_connections_dropped_total);
    // they have the handshake deadline, as every connection does.
    const silence = peerDeadline(
      firstFlightMs,
      () => {
        if (handshaking.has(socket) && !known.has(source) && heardClientHello(socket) === false) {
          counters.silent++;
          dropped("silent", "stranger");
          socket.destroy();
        }
      },
      false,
    );
    // A known source's handshake gets KNOWN_SOURCE_HANDSHAKE_TIMEOUT_MS. The
    // runtime's own handshake timer, which this deadline replaced, never
    // closed a connection that had sent its ClientHello (tls.ts); with this
    // one at 10 s for everyone, an owner's ctl call in the loaded unit suite
    // (a dozen node processes on two cores) dropped about 10 s after it
    // began, once, most likely in its handshake.
    const unfinished = peerDeadline(
      isKnown ? knownHandshakeMs : handshakeMs,
      () => {
        if (!handshaking.has(socket)) return;
        counters.unfinished++;
        dropped("unfinished", known.has(source) ? "known" : "stranger");
        socket.destroy();
      },
      isKnown,
    );
    let firstCall: { clear(): void } | undefined;
    const key = connectionKey(socket);
    const markKnown = () => remember(source);
    socket.once("close", () => {
      silence.clear();
      unfinished.clear();
      firstCall?.clear();
      if (connections.get(key)?.known === markKnown) connections.delete(key);
      finished(socket);
      counters.open--;
      processConnections--;
      if (--count.open === 0) sources.delete(source);
    });
    handshook.set(socket, () => {
      silence.clear();
      unfinished.clear();
      connections.set(key, { used: false, asked: false, known: markKnown });
      // A certificate is believed, never an address: one the cluster CA
      // issued gets the time back that a known source gets.
      const vouched = limits.vouch !== undefined && limits.vouch(peerCertificateOf((socket as unknown as TLSSocket).getPeerCertificate?.()));
      let extensions = 0;
      const judge = () => {
        const entry = connections.get(key);
        if (!entry || entry.used) return;
        // A call that arrived but is not judged by its policy yet (the
        // server was slow to get to it) gets one more deadline: dropped
        // now, it failed as "the connection dropped during the call" (a
        // node's role watch, heartbeat and registry watch died so, 20 to 30
        // times in one e2e run, on connections a node's pool had dialled
        // and called only later). A connection the cluster's certificate
        // vouches for gets more (ASKED_EXTENSIONS_VOUCHED): node1 starting
        // its apiserver under TCG still dropped 4 of the owner's calls so
        // after one (the loaded 3-VM bench, 2026-12-01).
        if (entry.asked && extensions < (vouched ? ASKED_EXTENSIONS_VOUCHED : 1)) {
          extensions++;
          firstCall = peerDeadline(firstCallMs, judge, vouched || known.has(source));
          return;
        }
        counters.idle++;
        dropped("idle", known.has(source) ? "known" : "stranger");
        socket.destroy();
      };
      firstCall = peerDeadline(firstCallMs, judge, vouched || known.has(source));
    });
  });
  // A gRPC call arrived on the connection (its headers are read): it is
  // asked, though its policy may not have let it in yet (judge, above).
  listener.prependListener("stream", (stream: { session?: { socket?: { remoteAddress?: string; remotePort?: number } } }) => {
    const socket = stream.session?.socket;
    const entry = socket ? connections.get(connectionKey(socket)) : undefined;
    if (entry) entry.asked = true;
  });
  // bun hands the same TLS socket to "connection" and "secureConnection".
  listener.on("secureConnection", (socket: Socket) => {
    if (!handshaking.has(socket)) return;
    finished(socket);
    handshook.get(socket)?.();
    handshook.delete(socket);
  });
}

/**
 * A vouch (ListenLimits.vouch): the certificate is one the cluster CA
 * issued (the owner's, a node's, a join or metrics reader certificate),
 * checked as every call checks it (peer.ts). What it may call is still
 * its policy's business; this only says it is no stranger.
 */
export function vouchedUnder(ca: () => X509Certificate): (certificate: X509Certificate | undefined) => boolean {
  return (certificate) => {
    // Runs in the listener's handshake event, before any call's error
    // handling: a certificate that cannot even be checked vouches for nothing.
    try {
      const kind = authenticate(certificate, ca()).kind;
      return kind === "owner" || kind === "node" || kind === "join" || kind === "metrics";
    } catch {
      return false;
    }
  };
}

/** The default bounds, with the cluster's certificates vouched for: what a server of the cluster listens with. */
export function clusterListenLimits(ca: () => X509Certificate): ListenLimits {
  return { maxConnections: MAX_CONNECTIONS, maxPendingHandshakes: MAX_PENDING_HANDSHAKES, vouch: vouchedUnder(ca) };
}

/** What each connection does once its handshake is done. */
const handshook = new WeakMap<Socket, () => void>();

/**
 * Binds `server` on the unix socket `path`, for a local service: callers
 * are processes on this node (Peer "local", policy "local"), with no TLS;
 * who may connect is the socket file's business: it is made 0600 (root
 * only), in a directory made 0700 if it has to be made. A stale socket
 * file from an earlier run is replaced.
 */
export async function listenLocal(server: Server, path: string): Promise<void> {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  rmSync(path, { force: true });
  await new Promise<number>((resolve, reject) => server.bindAsync(`unix:${path}`, ServerCredentials.createInsecure(), (err, port) => (err ? reject(err) : resolve(port))));
  chmodSync(path, 0o600);
}

/** A client's credentials for a local service's unix socket (listenLocal): none. */
export function localCredentials(): ChannelCredentials {
  return ChannelCredentials.createInsecure();
}
