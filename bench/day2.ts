// Day-2 figures (issue 10), printed, never asserted:
//  - the log rings' memory at their bound: the heap a LogTree holds once
//    its text bound is reached with node-like entries;
//  - log follow latency: a line appended to a node's log tree → the owner's
//    follower receives it, over the node management service (real mutual
//    TLS on loopback);
//  - process mode: a node process SIGKILLed → the curator leader lists it
//    as HEARTBEAT_TIMEOUT (polled every 200 ms), over several trials.
// The figure for a VM powered off is printed by the qemu e2e.
//   bun bench/day2.ts [trials=3]

import { create } from "@bufbuild/protobuf";
import { Management, Node_Health } from "../proto/gen/api/management_pb.ts";
import { ClusterDirectorySchema } from "../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../internal/cluster/mod.ts";
import { CuratorPool, HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS } from "../internal/curator/client/mod.ts";
import { Value } from "../internal/event/mod.ts";
import { captureLogger } from "../internal/log/mod.ts";
import { LogTree, MAX_TOTAL_CHARS } from "../internal/logtree/mod.ts";
import { dialNodeManagement } from "../internal/nodemgmt/client/mod.ts";
import { nodeManagementRunnable } from "../internal/nodemgmt/mod.ts";
import { configPaths, loadCredentials } from "../internal/operator/mod.ts";
import { createClusterCA, generateKeyPair, issueNodeCertificate, issueOwnerCertificate, nodeIdFromPublicKey, rawPublicKey } from "../internal/pki/mod.ts";
import { supervise } from "../internal/supervisor/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { formProcessCluster } from "../test/support/process_cluster.ts";
import { figure, ms, percentile, seconds } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const TRIALS = wholeNumber("trials", benchArgs({}, { name: "trials", default: "3", help: "trials of each operation" }).positional);
const WIDTH = 70;

function heapMiB(): number {
  Bun.gc(true);
  return process.memoryUsage().heapUsed / 2 ** 20;
}

/** A LogTree filled past its bound with lines like a node's: 40 components, ~120-character messages, three fields. */
function ringMemory(): void {
  const before = heapMiB();
  const tree = new LogTree();
  const components = Array.from({ length: 40 }, (_, i) => `root.roleserve.worker${i}.output`);
  for (let i = 0; tree.stats().chars < MAX_TOTAL_CHARS || i < 200_000; i++) {
    tree.append({
      time: new Date(),
      level: "info",
      path: components[i % components.length]!,
      message: `raft.node: 8e9e05c52164694d elected leader 8e9e05c52164694d at term ${i} — applied index ${i * 7}, ${"x".repeat(40)}`,
      fields: { stream: "stderr", node: "node-1a2b3c4d5e6f7a8b", index: i },
    });
  }
  const after = heapMiB();
  const stats = tree.stats();
  figure("log rings at their bound: entries kept / text (characters)", `${stats.entries} / ${(stats.chars / 2 ** 20).toFixed(1)} Mi`, WIDTH);
  figure("log rings at their bound: heap held", `${(after - before).toFixed(1)} MiB`, WIDTH);
}

async function followLatency(): Promise<void> {
  const caKey = generateKeyPair();
  const ca = { certificate: createClusterCA(caKey), privateKey: caKey.privateKey };
  const nodeKey = generateKeyPair();
  const nodeId = nodeIdFromPublicKey(rawPublicKey(nodeKey.publicKey));
  const ownerKey = generateKeyPair();
  const owner = { ca: ca.certificate, certificate: issueOwnerCertificate(ca, ownerKey.publicKey), privateKey: ownerKey.privateKey };
  const membership = new Value<ClusterMembership>();
  membership.set({
    credentials: { nodeId, privateKey: nodeKey.privateKey, publicKey: nodeKey.publicKey, certificate: issueNodeCertificate(ca, nodeKey.publicKey), ca: ca.certificate },
    address: "127.0.0.1",
    directory: create(ClusterDirectorySchema),
    clusterUnlockKey: new Uint8Array(32),
  });
  const tree = new LogTree();
  const port = 23_000 + (process.pid % 5_000);
  const supervisor = supervise(nodeManagementRunnable({ membership, port, logs: tree, services: () => [], power: () => {} }), { logger: captureLogger("root").logger });
  const client = dialNodeManagement(nodeId, "127.0.0.1", owner, port);
  await eventually(async () => client.getServices({}, { timeoutMs: 1_000 }), { timeoutMs: 10_000, what: "node management serving" });
  const stop = new AbortController();
  const sent = new Map<string, number>();
  const samples: number[] = [];
  const following = (async () => {
    for await (const response of client.getLogs({ path: "root.bench", follow: true }, { signal: stop.signal })) {
      for (const entry of response.entries) {
        const at = sent.get(entry.message);
        if (at !== undefined) samples.push(performance.now() - at);
      }
    }
  })().catch(() => {});
  // The follower is subscribed once a first line arrives.
  await eventually(
    () => {
      tree.append({ time: new Date(), level: "info", path: "root.bench", message: "warm-up" });
      sent.set("warm-up", performance.now());
      return samples.length > 0;
    },
    { timeoutMs: 10_000, intervalMs: 100, what: "the follower subscribed" },
  );
  samples.length = 0;
  for (let i = 0; i < 500; i++) {
    const message = `line ${i}`;
    sent.set(message, performance.now());
    tree.append({ time: new Date(), level: "info", path: "root.bench", message });
    await Bun.sleep(2);
  }
  await eventually(() => samples.length >= 500, { timeoutMs: 10_000, what: "every line followed" });
  stop.abort();
  await following;
  client.close();
  await supervisor.stop();
  figure("log follow latency (append → owner's follower), p50 / p99", `${ms(percentile(samples, 50))} / ${ms(percentile(samples, 99))}`, WIDTH);
}

async function heartbeatTimeout(): Promise<void> {
  const dir = tempDir("nodecore-bench-day2-");
  const cluster = await formProcessCluster(dir.path, 230);
  const owner = loadCredentials(configPaths(cluster.ctlDir), cluster.ownerKeyFile);
  const pool = new CuratorPool({ ca: owner.ca, certificate: owner.certificate, privateKey: owner.key.privateKey });
  const healthOf = async (id: string) =>
    pool.call(Management, owner.endpoints, async (m) => {
      for await (const node of m.getNodes({}, { timeoutMs: 2_000 })) if (node.id === id) return node.health;
      return undefined;
    });
  const victim = cluster.nodes[2]!;
  const id = cluster.ids.get(victim)!;
  const samples: number[] = [];
  try {
    for (let n = 0; n < TRIALS; n++) {
      await eventually(async () => (await healthOf(id)) === Node_Health.HEALTHY, { timeoutMs: 60_000, intervalMs: 500, what: "the node HEALTHY" });
      const killed = performance.now();
      await victim.stop("SIGKILL");
      await eventually(async () => (await healthOf(id)) === Node_Health.HEARTBEAT_TIMEOUT, { timeoutMs: 60_000, intervalMs: 200, what: "HEARTBEAT_TIMEOUT" });
      samples.push(performance.now() - killed);
      console.log(`  trial ${n + 1}: SIGKILL → HEARTBEAT_TIMEOUT after ${seconds(samples.at(-1)!, 2)}`);
      victim.start();
    }
  } finally {
    pool.close();
    await cluster.stop();
    dir[Symbol.dispose]();
  }
  figure(`node process SIGKILLed → HEARTBEAT_TIMEOUT (${TRIALS} trials), p50 / max`, `${seconds(percentile(samples, 50), 2)} / ${seconds(Math.max(...samples), 2)}`, WIDTH);
  figure("  (heartbeat interval / leader's timeout)", `${seconds(HEARTBEAT_INTERVAL_MS)} / ${seconds(HEARTBEAT_TIMEOUT_MS)}`, WIDTH);
}

console.log(`day-2 figures on ${process.platform} ${process.arch}, ${navigator.hardwareConcurrency} cores, bun ${Bun.version}`);
ringMemory();
await followLatency();
await heartbeatTimeout();
process.exit(0);
