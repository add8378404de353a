// Getting a user's image onto a worker, two ways, printed, never asserted
// (issue 43): an image of about 50 MiB (busybox and 48 MiB of random
// bytes, so nothing compresses or dedupes; a new one per run)
//  - pulled from a real registry (Debian's docker-registry, TLS from its
//    own CA, htpasswd) through CRI PullImage, as the kubelet pulls, by the
//    built containerd, with the login the built init answers as the
//    kubelet's credential provider;
//  - pulled by a second containerd from the first, by digest, through the
//    peer mirror (its loopback proxy → ImagePeer over mutual TLS → the
//    first's content store): the second worker's pull once one holds it;
//  - imported with `ctl image import` onto a node process holding the
//    worker role (node management → the bundle checked whole → ctr import).
// On this host, not in a VM: the registry and the first containerd share a
// network namespace of their own; the second containerd, which cannot reach
// the registry, and the node process are on loopback. The two workers'
// certificates come from a test CA and their records are written here (no
// curator): what the peer mirror trusts is given, not proven, in this bench.
//   bun bench/images.ts [runs=3]

import { create } from "@bufbuild/protobuf";
import { cpus } from "node:os";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ContainerRegistrySchema } from "../proto/gen/common/common_pb.ts";
import { CRI_NAMESPACE, ctr, imagePeersService, writeRegistryHosts } from "../internal/containerd/mod.ts";
import { NodeState } from "../proto/gen/common/common_pb.ts";
import { NodeSchema, type Node } from "../proto/gen/curator/curator_pb.ts";
import { Value } from "../internal/event/mod.ts";
import { captureLogger } from "../internal/log/mod.ts";
import { supervise } from "../internal/supervisor/mod.ts";
import { testCA, testNode } from "../internal/testing/mod.ts";
import { credentialResponse, credentialsFile } from "../internal/kubernetes/mod.ts";
import { freePorts, tempDir } from "../internal/testing/mod.ts";
import { HOST_BUSYBOX, readBusybox } from "../image/mod.ts";
import { ContainerRegistryServer, spawnIn } from "../test/launch/registry.ts";
import { NAMESPACE_PREFIX, NetworkNamespace, subnetOf } from "../test/launch/network_namespace.ts";
import { startCriContainerd } from "../test/support/cri.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "../test/support/node_process.ts";
import { randomImage } from "./random_image.ts";
import { figure, spread } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const RUNS = wholeNumber("runs", benchArgs({}, { name: "runs", default: "3", help: "runs of each way, each with a new image" }).positional);
const RANDOM_LAYER_BYTES = 48 * 1024 * 1024;
const WIDTH = 66;

const cpu = readFileSync("/proc/cpuinfo", "utf8").match(/^model name\s*:\s*(.+)$/m)?.[1] ?? "unknown CPU";
console.log(`images bench: ${RUNS} runs, an image of ${((RANDOM_LAYER_BYTES + readBusybox(HOST_BUSYBOX).length) / 2 ** 20).toFixed(1)} MiB each; this host: ${cpus().length} cores, ${cpu}`);

using dir = tempDir("nodecore-bench-images-");
const ns = await NetworkNamespace.create(`${NAMESPACE_PREFIX}bench-img-${process.pid}`, subnetOf(202));
const [port, peerPort, proxyA, proxyB] = freePorts(4) as [number, number, number, number];
const registry = await ContainerRegistryServer.start({
  dir: join(dir.path, "registry"),
  address: ns.subnet.bridgeAddress,
  port,
  username: "bench",
  password: "bench-password",
  spawn: spawnIn(ns),
});
const runtime = await startCriContainerd(ns, join(dir.path, "containerd"), "nodecore-bench-images");
const { paths, images: cri } = runtime;
const entry = create(ContainerRegistrySchema, { host: registry.host, caPem: registry.caPem, credentials: { username: "bench", password: "bench-password" } });
// The peer mirror between the first containerd (A, beside the registry) and a second (B).
const second = await startCriContainerd(undefined, join(dir.path, "containerd-b"), "nodecore-bench-images-b");
const ca = testCA();
const [a, b] = [testNode(ca), testNode(ca)];
const record = (id: string) => create(NodeSchema, { id, state: NodeState.UP, roles: { kubernetesWorker: {} }, status: { externalAddress: "127.0.0.1" } });
const records = new Value<readonly Node[]>();
records.set([record(a.id), record(b.id)]);
const endpointA = { url: `http://127.0.0.1:${proxyA}`, token: "bench-a" };
const endpointB = { url: `http://127.0.0.1:${proxyB}`, token: "bench-b" };
writeRegistryHosts(paths.registryHosts, [entry], endpointA);
writeRegistryHosts(second.paths.registryHosts, [], endpointB);
const { logger } = captureLogger("bench");
const peersA = supervise(imagePeersService({ tls: a.credentials, address: "127.0.0.1", nodes: records, contentRoot: paths.root, endpoint: endpointA, servePort: peerPort }), { logger });
const peersB = supervise(imagePeersService({ tls: b.credentials, address: "127.0.0.2", nodes: records, contentRoot: second.paths.root, endpoint: endpointB, servePort: peerPort }), { logger });
const node = new NodeProcess("node1", join(dir.path, "node1"), loopbackBlock()(11));
const { ctl, bootstrap } = ownedNode(node, dir.path);
try {
  const id = String((await bootstrap()).node);
  if ((await ctl("node", "roles", "set", id, "kubernetes-worker")).code !== 0) throw new Error("could not give the node the worker role");
  await node.waitForLog((l) => /^runtime probe: pid /.test(l.msg), { timeoutMs: 90_000, what: "the node's containerd running" });
  const pulls: number[] = [];
  const peerPulls: number[] = [];
  const imports: number[] = [];
  for (let run = 0; run < RUNS; run++) {
    const pushedRef = `${registry.host}/bench/big:${run}`;
    const tarball = join(dir.path, `big-${run}.tar`);
    writeFileSync(tarball, randomImage(pushedRef, RANDOM_LAYER_BYTES));
    await registry.push(tarball, `bench/big:${run}`, (argv) => ns.run(argv));
    const login = JSON.parse(credentialResponse(JSON.stringify({ kind: "CredentialProviderRequest", image: pushedRef }), credentialsFile([entry]))).auth[registry.host];
    let started = performance.now();
    await cri.pull(pushedRef, login, 600_000);
    pulls.push(performance.now() - started);
    const row = (await ctr(paths, ["images", "ls"], undefined, CRI_NAMESPACE)).split("\n").find((line) => line.startsWith(`${pushedRef} `));
    const digest = /(sha256:[a-f0-9]{64})/.exec(row ?? "")?.[1];
    if (!digest) throw new Error(`no digest for ${pushedRef} in containerd's listing`);
    started = performance.now();
    await second.images.pull(`${registry.host}/bench/big@${digest}`, undefined, 600_000);
    peerPulls.push(performance.now() - started);
    // Another random layer for the import, so that it too starts cold.
    writeFileSync(tarball, randomImage(`offline.example.com/bench/big:${run}`, RANDOM_LAYER_BYTES));
    started = performance.now();
    const imported = await ctl("image", "import", tarball, "--node", id);
    if (imported.code !== 0) throw new Error(`ctl image import: ${imported.stderr}`);
    imports.push(performance.now() - started);
  }
  figure("pull from the registry (CRI PullImage, TLS + login), min/median/max", spread(pulls), WIDTH);
  figure("the second worker's pull from the first (peer mirror), min/median/max", spread(peerPulls), WIDTH);
  figure("ctl image import onto a node process, min/median/max", spread(imports), WIDTH);
} finally {
  await node.stop();
  await peersA.stop();
  await peersB.stop();
  await second.stop();
  await runtime.stop();
  await registry.stop();
  await ns.destroy();
}
