// The peer mirror with two real containerds, on this host but for the
// kubelets (which need cgroup v2: the qemu e2e runs them):
//
//   worker A: containerd in a network namespace with Debian's docker-registry
//        (TLS from its own CA, htpasswd); it pulls the two-layer image by tag
//   worker B: containerd in the host's network, where the registry is not
//        (nothing connects the namespace to it); hosts.toml names only B's
//        peer mirror (_default)
//        B's pull by digest ──▶ B's proxy ──ImagePeer, mutual TLS──▶ A's
//        content store
//
// Both nodes are enrolled in a real curator, and hold the kubernetes-worker
// role in its records; the records are what each side trusts.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Management } from "../proto/gen/api/management_pb.ts";
import { Curator, WatchEvent_Progress, type Node } from "../proto/gen/curator/curator_pb.ts";
import { create } from "@bufbuild/protobuf";
import { ContainerRegistrySchema } from "../proto/gen/common/common_pb.ts";
import { CRI_NAMESPACE, ctr, imagePeersService, writeRegistryHosts, type PeerMirrorEndpoint } from "../internal/containerd/mod.ts";
import { enrolNode, ownerOf, startTestCluster, type TestCluster } from "../internal/curator/test_cluster.ts";
import { Value } from "../internal/event/mod.ts";
import { captureLogger, type LogEntry } from "../internal/log/mod.ts";
import { supervise, type Supervisor } from "../internal/supervisor/mod.ts";
import { eventually, freePorts, tempDir } from "../internal/testing/mod.ts";
import { helloImage, HOST_BUSYBOX, readBusybox } from "../image/mod.ts";
import { ContainerRegistryServer, spawnIn } from "./launch/registry.ts";
import { NetworkNamespace, NAMESPACE_PREFIX, subnetOf } from "./launch/network_namespace.ts";
import { startCriContainerd } from "./support/cri.ts";

const dir = tempDir("nodecore-peers-");
const PASSWORD = "pw-peers-7Hq";

let ns: NetworkNamespace;
let cluster: TestCluster;
let registry: ContainerRegistryServer;
let workerA: Awaited<ReturnType<typeof startCriContainerd>>;
let workerB: Awaited<ReturnType<typeof startCriContainerd>>;
let peersA: Supervisor;
let peersB: Supervisor;
let logA: LogEntry[];
let logB: LogEntry[];
/** What A pulled: the image's ID (its configuration's digest) and the digest of its manifest. */
let imageId: string;
let manifestDigest: string;
const nodes = new Value<readonly Node[]>();
let endpointB: PeerMirrorEndpoint;
let idA = "";

beforeAll(async () => {
  ns = await NetworkNamespace.create(`${NAMESPACE_PREFIX}peers-${process.pid}`, subnetOf(202));
  cluster = await startTestCluster();
  // Taken once the cluster listens, so that none of them is one of its ports.
  const [registryPort, servePort, proxyA, proxyB] = freePorts(4) as [number, number, number, number];
  const owner = await ownerOf(cluster);
  const a = await enrolNode(cluster, owner);
  const b = await enrolNode(cluster, owner);
  idA = a.id;
  const management = cluster.client(Management, owner);
  for (const node of [a, b]) {
    await management.updateNodeRoles({ id: node.id, kubernetesWorker: true });
    // Each reports its address; the curator takes only the one the connection proves (loopback here).
    const curator = cluster.client(Curator, node);
    await curator.updateNodeStatus({ nodeId: node.id, status: { externalAddress: "127.0.0.1", timestampMs: BigInt(Date.now()) } });
    curator.close();
  }
  management.close();
  // The records as a worker follows them: the curator's Watch, to the end of its backlog.
  const watcher = cluster.client(Curator, a);
  const records: Node[] = [];
  for await (const event of watcher.watch({ kind: { case: "nodesInCluster", value: {} } })) {
    records.push(...event.nodes);
    if (event.progress === WatchEvent_Progress.LAST_BACKLOGGED) break;
  }
  watcher.close();
  nodes.set(records);

  registry = await ContainerRegistryServer.start({ dir: join(dir.path, "registry"), address: ns.subnet.bridgeAddress, port: registryPort, username: "alice", password: PASSWORD, spawn: spawnIn(ns) });
  const tarball = join(dir.path, "hello.oci.tar");
  writeFileSync(tarball, helloImage(readBusybox(HOST_BUSYBOX), "nodecore.test/hello:1"));
  await registry.push(tarball, "apps/hello:1", (argv) => ns.run(argv));

  workerA = await startCriContainerd(ns, join(dir.path, "a"), "nodecore-peers-a");
  workerB = await startCriContainerd(undefined, join(dir.path, "b"), "nodecore-peers-b");
  const endpoint = (port: number): PeerMirrorEndpoint => ({ url: `http://127.0.0.1:${port}`, token: `token-${port}` });
  const endpointA = endpoint(proxyA);
  endpointB = endpoint(proxyB);
  writeRegistryHosts(workerA.paths.registryHosts, [create(ContainerRegistrySchema, { host: registry.host, caPem: registry.caPem })], endpointA);
  writeRegistryHosts(workerB.paths.registryHosts, [], endpointB);

  // A serves on 127.0.0.1, where the records say both are; B on 127.0.0.2, so that B's own server does not stand in A's place.
  const peers = (node: typeof a, address: string, paths: typeof workerA.paths, endpoint: PeerMirrorEndpoint) => {
    const { logger, entries } = captureLogger("root");
    const supervisor = supervise(
      imagePeersService({
        tls: { nodeId: node.id, ca: cluster.clusterCA.certificate, certificate: node.certificate, privateKey: node.privateKey },
        address,
        nodes,
        contentRoot: paths.root,
        endpoint,
        servePort,
      }),
      { logger },
    );
    return { supervisor, entries };
  };
  const a_ = peers(a, "127.0.0.1", workerA.paths, endpointA);
  peersA = a_.supervisor;
  logA = a_.entries;
  const b_ = peers(b, "127.0.0.2", workerB.paths, endpointB);
  peersB = b_.supervisor;
  logB = b_.entries;
  await eventually(() => expect(logB.some((e) => e.message === "peer mirror serving")).toBe(true), { timeoutMs: 15_000, what: "B's peer mirror serving" });
}, 180_000);

afterAll(async () => {
  await peersA?.stop();
  await peersB?.stop();
  await workerA?.stop();
  await workerB?.stop();
  await registry?.stop();
  await ns?.destroy();
  await cluster?.close();
  dir[Symbol.dispose]();
}, 60_000);

describe("an image one worker pulled, the other pulls from it", () => {
  test("A pulls by tag from the registry (its peer B holds nothing: A's proxy passes it on to the registry)", async () => {
    imageId = await workerA.images.pull(`${registry.host}/apps/hello:1`, { username: "alice", password: PASSWORD });
    expect(imageId).toStartWith("sha256:");
    // The digest CRI keeps for the tag: the manifest's, as the registry served it.
    const listing = await ctr(workerA.paths, ["images", "ls"], undefined, CRI_NAMESPACE);
    const row = listing.split("\n").find((line) => line.startsWith(`${registry.host}/apps/hello:1 `));
    manifestDigest = /(sha256:[a-f0-9]{64})/.exec(row ?? "")?.[1] ?? "";
    expect(manifestDigest).toStartWith("sha256:");
    expect(logA.filter((e) => e.message === "image content pulled from a peer")).toEqual([]);
  }, 120_000);

  test("B, which cannot reach the registry, pulls it by digest from A, and every byte is checked", async () => {
    const from = logB.length;
    const ref = await workerB.images.pull(`${registry.host}/apps/hello@${manifestDigest}`, undefined, 60_000);
    expect(ref).toBe(imageId);
    const served = logB.slice(from).filter((e) => e.message === "image content pulled from a peer");
    // The manifest, the configuration and the two layers, all from A.
    expect(served.length).toBe(4);
    expect(new Set(served.map((e) => e.fields?.peer))).toEqual(new Set([idA]));
    expect(served.some((e) => e.fields?.digest === manifestDigest)).toBe(true);
  }, 120_000);

  test("a host set with --no-peers is never fetched from a peer: B, without the registry, cannot pull it", async () => {
    writeRegistryHosts(workerB.paths.registryHosts, [create(ContainerRegistrySchema, { host: registry.host, peersDisabled: true })], endpointB);
    await workerB.images.remove(`${registry.host}/apps/hello@${manifestDigest}`);
    // containerd keeps content an image no longer names until its garbage collection; what it still holds it does not fetch.
    await ctr(workerB.paths, ["content", "prune", "references"], undefined, CRI_NAMESPACE).catch(() => "");
    const from = logB.length;
    const refused = await workerB.images.pull(`${registry.host}/apps/hello@${manifestDigest}`, undefined, 60_000).then(
      () => "pulled",
      (err: Error) => err.message,
    );
    // Resolved at the host itself, which B cannot reach (whatever answers for that address outside the namespace, it is not the registry).
    expect(refused).toContain(`failed to resolve image: failed to do request: Head "https://${registry.host}/v2/apps/hello/manifests/${manifestDigest}"`);
    expect(logB.slice(from).filter((e) => e.message === "image content pulled from a peer")).toEqual([]);
  }, 120_000);
});
