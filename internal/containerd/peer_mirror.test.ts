import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create, type MessageInitShape } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { ContainerRegistrySchema, NodeState } from "../../proto/gen/common/common_pb.ts";
import { NodeSchema, type Node } from "../../proto/gen/curator/curator_pb.ts";
import { ImagePeer } from "../../proto/gen/imagepeer/imagepeer_pb.ts";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { channelCredentials, channelOptions, createClient, RpcError, Status, type Peer } from "../rpc/mod.ts";
import { supervise } from "../supervisor/mod.ts";
import { eventually, freePorts, testCA, testNode, tempDir } from "../testing/mod.ts";
import {
  contentPath,
  DEFAULT_HOST_DIR,
  hostsToml,
  imagePeersService,
  manifestMediaType,
  parseMirrorPath,
  PEER_TOKEN_HEADER,
  PeerClients,
  peerCallerProblem,
  peerMirrorAnswer,
  peerWorkers,
  readContent,
  writeRegistryHosts,
  type PeerNode,
  type PeerSource,
} from "./mod.ts";

const digestOf = (bytes: Uint8Array) => `sha256:${createHash("sha256").update(bytes).digest("hex")}`;
const peerEndpoint = { url: "http://127.0.0.1:7839", token: "t0ken" };
const registry = (fields: MessageInitShape<typeof ContainerRegistrySchema>) => create(ContainerRegistrySchema, { host: "registry.example.com", ...fields });

describe("hosts.toml with the peer mirror", () => {
  test("the proxy first, pull only (never resolve: tags come from the registry), with the boot's token; then the mirrors", () => {
    const text = hostsToml(registry({ mirrors: ["https://m1.example.com"] }), undefined, peerEndpoint);
    const peer = text.indexOf('[host."http://127.0.0.1:7839"]');
    expect(peer).toBeGreaterThan(0);
    expect(text.indexOf('[host."https://m1.example.com"]')).toBeGreaterThan(peer);
    expect(text).toContain('[host."http://127.0.0.1:7839"]\n  capabilities = ["pull"]\n  dial_timeout = "1s"\n  [host."http://127.0.0.1:7839".header]\n    x-nodecore-peer-token = "t0ken"\n');
  });

  test("a host with peers_disabled does not name the proxy", () => {
    expect(hostsToml(registry({ peersDisabled: true }), undefined, peerEndpoint)).not.toContain("127.0.0.1:7839");
  });

  test("every other host gets _default/hosts.toml with the proxy alone; without the peer mirror it is removed", () => {
    using dir = tempDir();
    const hostsDir = join(dir.path, "registries");
    writeRegistryHosts(hostsDir, [registry({})], peerEndpoint);
    expect(readdirSync(hostsDir).sort()).toEqual([DEFAULT_HOST_DIR, "registry.example.com"]);
    const fallback = readFileSync(join(hostsDir, DEFAULT_HOST_DIR, "hosts.toml"), "utf8");
    expect(fallback).toContain('capabilities = ["pull"]');
    expect(fallback).not.toContain("server =");
    writeRegistryHosts(hostsDir, [], peerEndpoint);
    expect(readdirSync(hostsDir)).toEqual([DEFAULT_HOST_DIR]);
    writeRegistryHosts(hostsDir, []);
    expect(readdirSync(hostsDir)).toEqual([]);
  });
});

describe("what the proxy serves", () => {
  test("digests only, never tags", () => {
    const digest = `sha256:${"a".repeat(64)}`;
    expect(parseMirrorPath(`/v2/apps/hello/blobs/${digest}`)).toEqual({ manifest: false, digest });
    expect(parseMirrorPath(`/v2/library/nginx/manifests/${digest}`)).toEqual({ manifest: true, digest });
    expect(parseMirrorPath(`/v2/a/b/c/manifests/sha512:${"b".repeat(128)}`)).toEqual({ manifest: true, digest: `sha512:${"b".repeat(128)}` });
    expect(parseMirrorPath("/v2/apps/hello/manifests/latest")).toEqual({ status: 404, why: "the peer mirror serves digests only, never tags" });
    expect(parseMirrorPath(`/v2/apps/hello/manifests/sha256:${"A".repeat(64)}`)).toMatchObject({ status: 404 });
    expect(parseMirrorPath("/v2/apps/hello/tags/list")).toMatchObject({ status: 404 });
  });

  test("a manifest's media type: its own, or what its fields say; anything else is not a manifest", () => {
    expect(manifestMediaType({ mediaType: "application/vnd.docker.distribution.manifest.v2+json", config: {}, layers: [] })).toBe("application/vnd.docker.distribution.manifest.v2+json");
    expect(manifestMediaType({ schemaVersion: 2, manifests: [] })).toBe("application/vnd.oci.image.index.v1+json");
    expect(manifestMediaType({ schemaVersion: 2, config: { digest: "x" }, layers: [] })).toBe("application/vnd.oci.image.manifest.v1+json");
    expect(manifestMediaType({ mediaType: "text/html" })).toBeUndefined();
    expect(manifestMediaType({ architecture: "amd64", rootfs: {} })).toBeUndefined();
    expect(manifestMediaType([1])).toBeUndefined();
    expect(manifestMediaType("x")).toBeUndefined();
  });
});

describe("who may fetch, and whom the proxy asks: the records", () => {
  const record = (id: string, fields: { state?: NodeState; roles?: MessageInitShape<typeof NodeSchema>["roles"]; status?: MessageInitShape<typeof NodeSchema>["status"] } = {}): Node =>
    create(NodeSchema, { id, state: fields.state ?? NodeState.UP, roles: fields.roles ?? { kubernetesWorker: {} }, status: fields.status ?? { externalAddress: `10.0.0.${id.length}` } });
  const nodePeer = (nodeId: string) => ({ kind: "node", nodeId }) as unknown as Peer;

  test("callers: UP kubernetes-workers only", () => {
    const nodes = [record("w1"), record("c1", { roles: { consensusMember: {} } }), record("n1", { state: NodeState.NEW })];
    expect(peerCallerProblem(nodePeer("w1"), nodes)).toBeUndefined();
    expect(peerCallerProblem(nodePeer("c1"), nodes)).toBe("node c1 does not hold the kubernetes-worker role");
    expect(peerCallerProblem(nodePeer("n1"), nodes)).toBe("node n1 is not an UP node in the cluster's records");
    expect(peerCallerProblem(nodePeer("gone"), nodes)).toContain("not an UP node");
    expect(peerCallerProblem({ kind: "owner" } as unknown as Peer, nodes)).toBe("only cluster nodes may fetch images from their peers");
  });

  test("peers: the other UP workers with an address", () => {
    const nodes = [record("self"), record("w2"), record("w3", { status: { externalAddress: "" } }), record("c1", { roles: {} })];
    expect(peerWorkers(nodes, "self")).toEqual([{ nodeId: "w2", address: "10.0.0.2" }]);
  });
});

/** A source of `bytes` as one peer holds them (a stand-in for the peers, to test the proxy's answer). */
function fakeSource(bytes: Uint8Array, served: Uint8Array = bytes): PeerSource & { distrusted: string[] } {
  const peer: PeerNode = { nodeId: "peer-1", address: "10.0.0.2" };
  const distrusted: string[] = [];
  return {
    distrusted,
    locate: async (digest) => (digest === digestOf(bytes) ? { peer, size: bytes.length, mediaType: "application/octet-stream" } : undefined),
    async *read() {
      for (let at = 0; at < served.length; at += 1000) yield served.subarray(at, at + 1000);
    },
    distrust: (p, why) => void distrusted.push(`${p.nodeId}: ${why}`),
  };
}

describe("the proxy's answers to containerd", () => {
  const { logger, entries } = captureLogger("peer-mirror");
  const bytes = new Uint8Array(5000).map((_, i) => i % 251);
  const digest = digestOf(bytes);
  const ask = (path: string, init: RequestInit & { token?: string | null } = {}) =>
    new Request(`http://127.0.0.1:7839${path}`, { ...init, headers: init.token === null ? {} : { [PEER_TOKEN_HEADER]: init.token ?? "t0ken" } });

  test("only this node's containerd (the token), only GET and HEAD, only digests", async () => {
    const source = fakeSource(bytes);
    expect((await peerMirrorAnswer(ask(`/v2/a/blobs/${digest}`, { token: null }), "t0ken", source, logger)).status).toBe(401);
    expect((await peerMirrorAnswer(ask(`/v2/a/blobs/${digest}`, { token: "t0kem" }), "t0ken", source, logger)).status).toBe(401);
    expect((await peerMirrorAnswer(ask(`/v2/a/blobs/${digest}`, { method: "DELETE" }), "t0ken", source, logger)).status).toBe(405);
    expect((await peerMirrorAnswer(ask("/v2/"), "t0ken", source, logger)).status).toBe(200);
    const tag = await peerMirrorAnswer(ask("/v2/a/manifests/latest"), "t0ken", source, logger);
    expect(tag.status).toBe(404);
    expect(await tag.text()).toContain("digests only");
    expect((await peerMirrorAnswer(ask(`/v2/a/blobs/sha256:${"0".repeat(64)}`), "t0ken", source, logger)).status).toBe(404);
  });

  test("HEAD gives the size, type and digest; GET the bytes, checked", async () => {
    const source = fakeSource(bytes);
    const head = await peerMirrorAnswer(ask(`/v2/a/blobs/${digest}`, { method: "HEAD" }), "t0ken", source, logger);
    expect(head.status).toBe(200);
    expect(head.headers.get("content-length")).toBe("5000");
    expect(head.headers.get("docker-content-digest")).toBe(digest);
    const get = await peerMirrorAnswer(ask(`/v2/a/blobs/${digest}`), "t0ken", source, logger);
    expect(new Uint8Array(await get.arrayBuffer())).toEqual(bytes);
    expect(source.distrusted).toEqual([]);
    expect(entries.some((e) => e.message === "image content pulled from a peer" && e.fields?.peer === "peer-1")).toBe(true);
  });

  test("bytes that are not what the digest says fail the stream before its end, and the peer is distrusted", async () => {
    const tampered = bytes.slice();
    tampered[4000] = tampered[4000]! ^ 1;
    for (const [served, why] of [
      [tampered, "its bytes hash to"],
      [bytes.subarray(0, 4000), "4000 bytes, not the 5000"],
      [new Uint8Array([...bytes, 1]), "more than the 5000 bytes"],
    ] as const) {
      const source = fakeSource(bytes, served);
      const get = await peerMirrorAnswer(ask(`/v2/a/blobs/${digest}`), "t0ken", source, logger);
      expect(get.status).toBe(200);
      expect(get.arrayBuffer()).rejects.toThrow(why);
      await eventually(() => expect(source.distrusted).toEqual([expect.stringContaining(why)]), { timeoutMs: 2000, what: "the peer distrusted" });
    }
  });
});

describe("ImagePeer between two workers, over mutual TLS under the cluster CA", () => {
  const ca = testCA();
  const a = testNode(ca);
  const b = testNode(ca);
  const stranger = testNode(ca);
  const dir = tempDir("nodecore-peers-");
  const [port, proxyPort] = freePorts(2) as [number, number];
  const record = (id: string, address: string, worker = true) => create(NodeSchema, { id, state: NodeState.UP, roles: worker ? { kubernetesWorker: {} } : {}, status: { externalAddress: address } });
  const nodes = new Value<readonly Node[]>();
  nodes.set([record(a.id, "127.0.0.1"), record(b.id, "127.0.0.2"), record(stranger.id, "127.0.0.3", false)]);
  const layer = new Uint8Array(32 * 256 * 1024 + 17).map((_, i) => (i * 7) % 256);
  const manifest = new TextEncoder().encode(JSON.stringify({ schemaVersion: 2, config: { digest: "sha256:x" }, layers: [{ digest: digestOf(layer) }] }));
  const { logger } = captureLogger("root");
  const supervisor = supervise(
    imagePeersService({ tls: a.credentials, address: "127.0.0.1", nodes, contentRoot: dir.path, endpoint: { url: `http://127.0.0.1:${proxyPort}`, token: "t" }, servePort: port }),
    { logger },
  );
  const clientOf = (node: typeof a) => new PeerClients(node.credentials, () => peerWorkers(nodes.peek()!, node.id), port);

  beforeAll(async () => {
    for (const content of [layer, manifest]) {
      const path = contentPath(dir.path, digestOf(content));
      mkdirSync(dirname(path), { recursive: true });
      writeFileSync(path, content);
    }
    await eventually(async () => expect(await fetch(`http://127.0.0.1:${proxyPort}/v2/`, { headers: { [PEER_TOKEN_HEADER]: "t" } }).then((r) => r.status)).toBe(200), {
      timeoutMs: 10_000,
      what: "the peer mirror serving",
    });
  });
  afterAll(async () => {
    await supervisor.stop();
    dir[Symbol.dispose]();
  });

  test("a worker finds content on its peer and reads it whole; a manifest with its media type", async () => {
    const peers = clientOf(b);
    try {
      const signal = new AbortController().signal;
      const found = await peers.locate(digestOf(layer), false, signal);
      expect(found).toEqual({ peer: { nodeId: a.id, address: "127.0.0.1" }, size: layer.length, mediaType: "application/octet-stream" });
      const chunks: Uint8Array[] = [];
      for await (const chunk of peers.read(found!.peer, digestOf(layer), false, signal)) chunks.push(chunk);
      expect(Buffer.concat(chunks).equals(Buffer.from(layer))).toBe(true);
      expect((await peers.locate(digestOf(manifest), true, signal))?.mediaType).toBe("application/vnd.oci.image.manifest.v1+json");
      // A layer is not a manifest, and what the peer lacks is not found.
      expect(await peers.locate(digestOf(layer), true, signal)).toBeUndefined();
      expect(await peers.locate(digestOf(new Uint8Array([1])), false, signal)).toBeUndefined();
      expect((await readContent(dir.path, digestOf(manifest), true))?.header.size).toBe(BigInt(manifest.length));
    } finally {
      peers.close();
    }
  });

  test("refused: a node the records do not name a worker; a worker that loses the role loses its open stream", async () => {
    const call = (node: typeof a) =>
      createClient(ImagePeer, `127.0.0.1:${port}`, {
        credentials: channelCredentials({ server: { ca: ca.certificate, verify: () => undefined }, certificate: node.credentials.certificate, privateKey: node.credentials.privateKey }),
        channelOptions: channelOptions(a.id),
      });
    const first = async (node: typeof a, headerOnly = true) => {
      const client = call(node);
      try {
        for await (const _ of client.fetch({ digest: digestOf(layer), headerOnly })) return "answered";
      } catch (err) {
        return err as RpcError;
      } finally {
        client.close();
      }
    };
    const strangerRefused = await first(stranger);
    expect(strangerRefused).toBeInstanceOf(RpcError);
    expect((strangerRefused as RpcError).code).toBe(Status.PERMISSION_DENIED);
    expect((strangerRefused as RpcError).details).toContain("does not hold the kubernetes-worker role");

    // b opens a stream and reads its first message, then the records take b's role away.
    const client = call(b);
    try {
      const stream = client.fetch({ digest: digestOf(layer) })[Symbol.asyncIterator]();
      expect((await stream.next()).value?.kind.case).toBe("header");
      nodes.set([record(a.id, "127.0.0.1"), record(b.id, "127.0.0.2", false)]);
      let ended: unknown;
      try {
        for (;;) if ((await stream.next()).done) break;
      } catch (err) {
        ended = err;
      }
      // 8 MiB cannot have passed HTTP/2's flow control before the client read on.
      expect((ended as RpcError).code).toBe(Status.PERMISSION_DENIED);
      expect((ended as RpcError).details).toContain("does not hold the kubernetes-worker role");
      const after = await first(b);
      expect((after as RpcError).code).toBe(Status.PERMISSION_DENIED);
    } finally {
      client.close();
      nodes.set([record(a.id, "127.0.0.1"), record(b.id, "127.0.0.2")]);
    }
  });

  test("the proxy dials only the node the records name, and only if the answering certificate is that node's", async () => {
    // The records say b is at a's address: a answers there, and is not b.
    const impostor = new PeerClients(stranger.credentials, () => [{ nodeId: b.id, address: "127.0.0.1" }], port);
    try {
      expect(await impostor.locate(digestOf(layer), false, new AbortController().signal)).toBeUndefined();
    } finally {
      impostor.close();
    }
    expect(existsSync(contentPath(dir.path, digestOf(layer)))).toBe(true);
  });
});

describe("connections to peers", () => {
  // After a node's boot on a busy emulated machine, the TLS handshake of a
  // pull's first question took longer than PEER_HEADER_TIMEOUT_MS, and the
  // first pieces came from the registry (CI). warm() connects beforehand.
  test("warm() connects to every named peer in the background, before any pull asks it", async () => {
    const { createServer } = await import("node:net");
    const self = testNode(testCA());
    const [port] = freePorts(1) as [number];
    const hosts = ["127.0.0.21", "127.0.0.22"];
    const accepted = new Set<string>();
    const servers = await Promise.all(
      hosts.map(
        (host) =>
          new Promise<ReturnType<typeof createServer>>((resolve) => {
            const server = createServer((socket) => {
              accepted.add(host);
              socket.on("error", () => {});
            });
            server.listen(port, host, () => resolve(server));
          }),
      ),
    );
    const peers = new PeerClients(self.credentials, () => hosts.map((address, i) => ({ nodeId: `node-00000000000000a${i}`, address })), port);
    try {
      await Bun.sleep(200);
      expect([...accepted]).toEqual([]);
      peers.warm();
      await eventually(() => expect([...accepted].sort()).toEqual(hosts), { timeoutMs: 10_000 });
    } finally {
      peers.close();
      for (const server of servers) server.close();
    }
  }, 15_000);
});
