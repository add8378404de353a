// The peer mirror: an image one worker holds is pulled by the others from
// it, inside the cluster, rather than from its registry again.
//
//   containerd (this node) ── GET /v2/<repo>/blobs/<digest>?ns=<host> ──▶
//   loopback proxy 127.0.0.1:7839 (peerMirrorHandler; hosts.toml names it
//        │ first for every registry host, pull only, with this boot's token)
//        │ 1. asks up to MAX_PEERS_ASKED workers at once: header only
//        │ 2. streams the content from the first that has it, hashing it
//        ▼
//   other workers' ImagePeer.Fetch (peer_content.ts), mutual TLS under the
//   cluster CA, each checked to be the node the records name at that address
//
// What keeps it safe:
//  - Digests only. containerd resolves a tag at the registry or its mirrors
//    (the hosts with "resolve"); the proxy has "pull" only, and answers
//    nothing but sha256/sha512 digests, so a node cannot poison a tag.
//  - Verified bytes. The proxy hashes what it streams; content that is not
//    what its digest says is cut off before its end (containerd discards
//    the download, as it would have on its own check) and the peer is not
//    asked again for DISTRUST_MS.
//  - Workers only. Each side proves it is a node by its certificate, and
//    the server serves only nodes the records name as kubernetes-workers;
//    the proxy dials only those, and checks the answering certificate is
//    the node it meant. Other processes on the node's loopback lack the
//    boot's token (hosts.toml is 0600 in a 0700 directory on tmpfs).
//  - Degrade, never block. A peer that holds nothing, is down or is slow
//    (PEER_HEADER_TIMEOUT_MS) is passed over; when none has it, the proxy
//    answers 404 and containerd goes on to the mirrors and the registry.
//
// A registry host set with `--no-peers` (ContainerRegistry.peers_disabled)
// is not mirrored: its hosts.toml does not name the proxy.

import { createHash, timingSafeEqual } from "node:crypto";
import { X509Certificate } from "node:crypto";
import type { KeyObject } from "node:crypto";
import { ImagePeer, type FetchResponse } from "../../proto/gen/imagepeer/imagepeer_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import type { Value } from "../event/mod.ts";
import type { Logger } from "../log/mod.ts";
import { nodeIdentityProblem } from "../pki/mod.ts";
import { addService, channelCredentials, channelOptions, createClient, createServer, hostPort, listen, PermissionDeniedError, serverCredentials, type Peer, type ServiceClient } from "../rpc/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { CONTENT_DIGEST, IMAGE_PEER_PORT, imagePeerService } from "./peer_content.ts";

/** The loopback port containerd reaches the peer mirror on. */
export const PEER_MIRROR_PORT = 7839;
/** The header that carries the boot's token from containerd (hosts.toml) to the proxy. */
export const PEER_TOKEN_HEADER = "x-nodecore-peer-token";
/** How many peers one request asks at most, chosen at random among the workers. */
export const MAX_PEERS_ASKED = 16;
/** How long a peer may take to say whether it holds something. */
export const PEER_HEADER_TIMEOUT_MS = 2_000;
/** How long a background connection to a peer may take (PeerClients.warm); a pull never waits on it. */
export const PEER_WARM_TIMEOUT_MS = 15_000;
/** How long a peer that served wrong bytes is not asked again. */
export const DISTRUST_MS = 10 * 60_000;
/** Requests the proxy looks up at once; more are answered 503, and containerd goes on to the next host. */
export const MAX_PROXY_REQUESTS = 64;

/** How containerd reaches the proxy: its URL and the boot's token (hosts.toml, internal/containerd/registries.ts). */
export interface PeerMirrorEndpoint {
  url: string;
  token: string;
}

/** A worker the proxy may ask: the records' ID and address. */
export interface PeerNode {
  nodeId: string;
  address: string;
}

/** The workers other than `self` that the records say are up, with an address. */
export function peerWorkers(nodes: readonly Node[], self: string): PeerNode[] {
  return nodes.filter((n) => n.id !== self && n.state === NodeState.UP && n.roles?.kubernetesWorker && n.status?.externalAddress).map((n) => ({ nodeId: n.id, address: n.status!.externalAddress }));
}

/** Why `peer` may not fetch from this node, by the records; undefined if it may. */
export function peerCallerProblem(peer: Peer, nodes: readonly Node[] | undefined): string | undefined {
  if (peer.kind !== "node") return "only cluster nodes may fetch images from their peers";
  const record = nodes?.find((n) => n.id === peer.nodeId);
  if (!record || record.state !== NodeState.UP) return `node ${peer.nodeId} is not an UP node in the cluster's records`;
  if (!record.roles?.kubernetesWorker) return `node ${peer.nodeId} does not hold the kubernetes-worker role`;
  return undefined;
}

/** What the proxy needs of the peers: where content is, and its bytes. */
export interface PeerSource {
  /** The first peer that says it holds `digest`, with its header; undefined if none does in time. */
  locate(digest: string, manifest: boolean, signal: AbortSignal): Promise<{ peer: PeerNode; size: number; mediaType: string } | undefined>;
  /** The content's bytes from `peer`, in order. */
  read(peer: PeerNode, digest: string, manifest: boolean, signal: AbortSignal): AsyncIterable<Uint8Array>;
  /** Told that `peer` served bytes that are not what their digest says. */
  distrust(peer: PeerNode, why: string): void;
}

/** A request's path on the registry API: which kind of content and its digest, or why it is not served. */
export function parseMirrorPath(path: string): { manifest: boolean; digest: string } | { status: number; why: string } {
  const match = /^\/v2\/(.+)\/(manifests|blobs)\/([^/]+)$/.exec(path);
  if (!match) return { status: 404, why: "not a manifest or blob path of the registry API" };
  const digest = decodeURIComponent(match[3]!);
  if (!CONTENT_DIGEST.test(digest)) return { status: 404, why: "the peer mirror serves digests only, never tags" };
  return { manifest: match[2] === "manifests", digest };
}

/** The digest of `bytes` as content names it. */
function hasher(digest: string) {
  return createHash(digest.startsWith("sha512:") ? "sha512" : "sha256");
}

const text = (status: number, body: string) => new Response(`${body}\n`, { status, headers: { "content-type": "text/plain" } });

/**
 * The proxy's answer to one request from containerd. Served content is
 * hashed on its way: bytes that are not what the digest says make the
 * stream fail before its end, and the peer is distrusted.
 */
export async function peerMirrorAnswer(request: Request, token: string, source: PeerSource, logger: Logger): Promise<Response> {
  const given = Buffer.from(request.headers.get(PEER_TOKEN_HEADER) ?? "");
  const expected = Buffer.from(token);
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return text(401, "the peer mirror answers only this node's containerd");
  if (request.method !== "GET" && request.method !== "HEAD") return text(405, "the peer mirror is read with GET or HEAD");
  const path = new URL(request.url).pathname;
  if (path === "/v2/" || path === "/v2") return new Response("{}", { headers: { "content-type": "application/json" } });
  const parsed = parseMirrorPath(path);
  if ("status" in parsed) return text(parsed.status, parsed.why);
  const { digest, manifest } = parsed;
  const located = await source.locate(digest, manifest, request.signal);
  if (!located) return text(404, `no peer holds ${digest}`);
  const headers = { "content-type": located.mediaType, "content-length": String(located.size), "docker-content-digest": digest };
  if (request.method === "HEAD") return new Response(null, { headers });
  const started = performance.now();
  const hash = hasher(digest);
  let received = 0;
  const chunks = source.read(located.peer, digest, manifest, request.signal)[Symbol.asyncIterator]();
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, why: string) => {
    source.distrust(located.peer, why);
    logger.warn("a peer served content that is not what it said; it is not asked again for a while", { peer: located.peer.nodeId, digest, why });
    controller.error(new Error(why));
  };
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      let next: IteratorResult<Uint8Array>;
      try {
        next = await chunks.next();
      } catch (err) {
        logger.info("a peer's content stream broke off; containerd tries the next host", { peer: located.peer.nodeId, digest, error: (err as Error).message });
        controller.error(err);
        return;
      }
      if (next.done) {
        const actual = `${digest.split(":")[0]}:${hash.digest("hex")}`;
        if (received !== located.size) return fail(controller, `${received} bytes, not the ${located.size} it announced`);
        if (actual !== digest) return fail(controller, `its bytes hash to ${actual}`);
        logger.info("image content pulled from a peer", { peer: located.peer.nodeId, digest, bytes: received, ms: Math.round(performance.now() - started) });
        controller.close();
        return;
      }
      received += next.value.length;
      if (received > located.size) return fail(controller, `more than the ${located.size} bytes it announced`);
      hash.update(next.value);
      controller.enqueue(next.value);
    },
    async cancel() {
      await chunks.return?.();
    },
  });
  return new Response(body, { headers });
}

/** The node's own TLS identity, for both sides. */
export interface PeerTls {
  nodeId: string;
  ca: X509Certificate;
  certificate: X509Certificate;
  privateKey: KeyObject;
}

/** A random sample of at most `n` of `items`. */
function sample<T>(items: readonly T[], n: number): T[] {
  const copy = [...items];
  for (let i = copy.length - 1; i > 0; i--) {
    const j = Math.floor(Math.random() * (i + 1));
    [copy[i], copy[j]] = [copy[j]!, copy[i]!];
  }
  return copy.slice(0, n);
}

/**
 * The peers as the records name them, dialled over mutual TLS: one client
 * per peer, kept while its address stays; a peer that served bad bytes is
 * skipped for DISTRUST_MS.
 */
export class PeerClients implements PeerSource {
  private readonly clients = new Map<string, { address: string; client: ServiceClient<typeof ImagePeer> }>();
  private readonly distrusted = new Map<string, number>();

  constructor(
    private readonly tls: PeerTls,
    private readonly peers: () => readonly PeerNode[],
    private readonly port = IMAGE_PEER_PORT,
  ) {}

  private client(peer: PeerNode): ServiceClient<typeof ImagePeer> {
    const known = this.clients.get(peer.nodeId);
    if (known && known.address === peer.address) return known.client;
    known?.client.close();
    const client = createClient(ImagePeer, hostPort(peer.address, this.port), {
      credentials: channelCredentials({
        server: { ca: this.tls.ca, verify: (certificate) => nodeIdentityProblem(certificate, peer.nodeId) },
        certificate: this.tls.certificate,
        privateKey: this.tls.privateKey,
      }),
      channelOptions: channelOptions(peer.nodeId),
    });
    this.clients.set(peer.nodeId, { address: peer.address, client });
    return client;
  }

  async locate(digest: string, manifest: boolean, signal: AbortSignal) {
    const now = Date.now();
    const candidates = sample(
      this.peers().filter((p) => (this.distrusted.get(p.nodeId) ?? 0) <= now),
      MAX_PEERS_ASKED,
    );
    if (candidates.length === 0) return undefined;
    const scope = new AbortController();
    const onAbort = () => scope.abort();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      const asks = candidates.map(async (peer) => {
        for await (const response of this.client(peer).fetch({ digest, manifest, headerOnly: true }, { signal: scope.signal, timeoutMs: PEER_HEADER_TIMEOUT_MS })) {
          if (response.kind.case === "header") return { peer, size: Number(response.kind.value.size), mediaType: response.kind.value.mediaType };
        }
        throw new Error("no header");
      });
      return await Promise.any(asks);
    } catch {
      // Nobody had it (NOT_FOUND), or answered in time.
      return undefined;
    } finally {
      signal.removeEventListener("abort", onAbort);
      scope.abort();
    }
  }

  async *read(peer: PeerNode, digest: string, manifest: boolean, signal: AbortSignal): AsyncIterable<Uint8Array> {
    for await (const response of this.client(peer).fetch({ digest, manifest }, { signal }) as AsyncIterable<FetchResponse>) {
      if (response.kind.case === "chunk") yield response.kind.value;
    }
  }

  distrust(peer: PeerNode, _why: string): void {
    this.distrusted.set(peer.nodeId, Date.now() + DISTRUST_MS);
  }

  /**
   * Connects to every peer in the background, at start and whenever the
   * records change, so that a pull's first question does not pay for a
   * TLS handshake inside PEER_HEADER_TIMEOUT_MS. On a busy emulated
   * machine right after a boot that handshake alone took longer, and the
   * first pieces of an image came from the registry instead (CI). A peer
   * that is down fails its connection here, so a pull's question to it
   * fails at once rather than waiting out the header deadline. One
   * connection per peer (a cluster of N workers keeps N−1 on each); a
   * channel idle for 30 minutes closes (grpc-js), and the next change of
   * the records connects it again.
   */
  warm(): void {
    for (const peer of this.peers())
      void this.client(peer)
        .connect(PEER_WARM_TIMEOUT_MS)
        .catch(() => {});
  }

  /** Closes the clients of peers no longer named. */
  prune(): void {
    const named = new Set(this.peers().map((p) => p.nodeId));
    for (const [nodeId, { client }] of this.clients) {
      if (named.has(nodeId)) continue;
      client.close();
      this.clients.delete(nodeId);
    }
  }

  close(): void {
    for (const { client } of this.clients.values()) client.close();
    this.clients.clear();
  }
}

export interface ImagePeersOptions {
  tls: PeerTls;
  /** The node's address: ImagePeer is served there. */
  address: string;
  /** Read: the cluster's node records (who may fetch, whom to ask). */
  nodes: Value<readonly Node[]>;
  /** containerd's root (RuntimePaths.root): the content served. */
  contentRoot: string;
  /** What containerd's hosts.toml names: the proxy listens on the URL's port on loopback. */
  endpoint: PeerMirrorEndpoint;
  servePort?: number;
  /** Told once both halves listen. */
  onServing?: () => void;
}

/** A fresh endpoint for this boot: the loopback URL and a random token. */
export function peerMirrorEndpoint(port = PEER_MIRROR_PORT): PeerMirrorEndpoint {
  return { url: `http://127.0.0.1:${port}`, token: Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("hex") };
}

/**
 * Both halves on a worker: ImagePeer on the node's address, and the
 * loopback proxy containerd asks. Healthy once both listen.
 */
export function imagePeersService(options: ImagePeersOptions): Runnable {
  return async (ctx) => {
    const nodes = () => options.nodes.peek();
    const server = createServer();
    addService(server, ImagePeer, imagePeerService(options.contentRoot), {
      ca: () => options.tls.ca,
      policy: { fetch: "node" },
      admit: async (peer) => {
        const problem = peerCallerProblem(peer, nodes());
        if (problem) throw new PermissionDeniedError(problem);
      },
      revoked: async (peer, signal) => {
        await options.nodes.waitFor((list) => peerCallerProblem(peer, list) !== undefined, { signal });
        return new PermissionDeniedError(peerCallerProblem(peer, nodes()) ?? "the caller lost its right");
      },
      onError: (method, err) => ctx.logger.debug("peer call failed", { method, error: String(err) }),
    });
    const servePort = options.servePort ?? IMAGE_PEER_PORT;
    const address = hostPort(options.address, servePort);
    try {
      await listen(server, address, serverCredentials({ certificate: options.tls.certificate, privateKey: options.tls.privateKey }));
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${address}: ${(err as Error).message}`, { cause: err });
    }
    const peers = new PeerClients(options.tls, () => peerWorkers(nodes() ?? [], options.tls.nodeId), servePort);
    const url = new URL(options.endpoint.url);
    let serving = 0;
    let proxy: ReturnType<typeof Bun.serve>;
    try {
      proxy = Bun.serve({
        hostname: url.hostname,
        port: Number(url.port),
        idleTimeout: 60,
        fetch: async (request) => {
          if (serving >= MAX_PROXY_REQUESTS) return text(503, "the peer mirror is busy");
          serving++;
          try {
            return await peerMirrorAnswer(request, options.endpoint.token, peers, ctx.logger);
          } finally {
            serving--;
          }
        },
        error: (err) => text(500, `the peer mirror failed: ${err.message}`),
      });
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${url.host}: ${(err as Error).message}`, { cause: err });
    }
    ctx.logger.info("peer mirror serving", { peers: address, proxy: url.host });
    options.onServing?.();
    ctx.signalHealthy();
    const pruning = (async () => {
      using watcher = options.nodes.watch();
      for (;;) {
        await watcher.get({ signal: ctx.signal });
        peers.prune();
        peers.warm();
      }
    })().catch(() => {});
    try {
      await untilCancelled(ctx.signal);
    } finally {
      void proxy.stop(true);
      server.forceShutdown();
      peers.close();
      await pruning;
    }
  };
}
