// Failover figures, process mode: three node processes on loopback, all
// consensus members. Each trial SIGKILLs the node of the curator leader
// while the owner writes in a loop, and measures
//  - kill → the owner's next successful write (a role change for a survivor);
//  - kill → every survivor's role fetch and status push working again: the
//    role the owner just wrote reached the survivor (role fetch) and its
//    status, saying what became of the role, reached the new leader
//    (status push);
// then starts the killed node again and waits until it votes again.
// Also: owner read and write latency through the curator pool.
// Prints p50 and max; asserts nothing.
//   bun bench/failover.ts [trials=5]

import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Management } from "../proto/gen/api/management_pb.ts";
import { CuratorPool } from "../internal/curator/client/mod.ts";
import { LEADER_LEASE_TTL_S } from "../internal/curator/mod.ts";
import { configPaths, loadCredentials } from "../internal/operator/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { figure, ms, percentile, seconds } from "./figures.ts";
import { formProcessCluster, type ProcessCluster } from "../test/support/process_cluster.ts";
import type { NodeProcess } from "../test/support/node_process.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const TRIALS = wholeNumber("trials", benchArgs({}, { name: "trials", default: "5", help: "leader failovers" }).positional);
const WRITE_INTERVAL_MS = 100;

const WIDTH = 66;
const s2 = (n: number) => seconds(n, 2);

async function latency(pool: CuratorPool, cluster: ProcessCluster, endpoints: Parameters<CuratorPool["call"]>[1]): Promise<void> {
  const reads: number[] = [];
  const writes: number[] = [];
  const id = cluster.ids.get(cluster.nodes[1]!)!;
  for (let i = 0; i < 300; i++) {
    let t = performance.now();
    await pool.call(Management, endpoints, (m) => m.getClusterInfo({}, { timeoutMs: 5_000 }));
    reads.push(performance.now() - t);
    t = performance.now();
    await pool.call(Management, endpoints, (m) => m.updateNodeRoles({ id, kubernetesWorker: false }, { timeoutMs: 5_000 }));
    writes.push(performance.now() - t);
  }
  figure("owner read (GetClusterInfo) through the pool, p50 / p99", `${ms(percentile(reads, 50))} / ${ms(percentile(reads, 99))}`, WIDTH);
  figure("owner write (UpdateNodeRoles) through the pool, p50 / p99", `${ms(percentile(writes, 50))} / ${ms(percentile(writes, 99))}`, WIDTH);
}

async function trial(cluster: ProcessCluster, pool: CuratorPool, endpoints: Parameters<CuratorPool["call"]>[1], n: number) {
  const listNodes = () =>
    pool.call(Management, endpoints, async (m) => {
      const all = [];
      for await (const node of m.getNodes({}, { timeoutMs: 2_000 })) all.push(node);
      return all;
    });
  // Each survivor's Kubernetes worker role is flipped after the kill, so
  // that its role fetch and its status push both have something to carry.
  const before = await listNodes();
  const flipped = new Map(cluster.nodes.map((node) => [node, !before.find((r) => r.id === cluster.ids.get(node))?.roles?.kubernetesWorker]));
  const setWorker = (node: NodeProcess) => pool.call(Management, endpoints, (m) => m.updateNodeRoles({ id: cluster.ids.get(node)!, kubernetesWorker: flipped.get(node)! }, { timeoutMs: 2_000 }));
  const leader = cluster.nodes.find((node) => node.address === pool.leader?.host);
  if (!leader) throw new Error(`the pool names no leader among the nodes (${pool.leader?.host})`);
  const survivors = cluster.nodes.filter((node) => node !== leader);
  const logsFrom = new Map(survivors.map((node) => [node, node.logs.length]));
  const killedAt = performance.now();
  const killedAtWall = Date.now();
  await leader.stop("SIGKILL");
  // The owner's loop: write until a write goes through, for each survivor.
  let firstWrite: number | undefined;
  for (const node of survivors) {
    for (;;) {
      try {
        await setWorker(node);
        firstWrite ??= performance.now() - killedAt;
        break;
      } catch {
        await Bun.sleep(WRITE_INTERVAL_MS);
      }
    }
  }
  await eventually(
    async () => {
      const listed = await listNodes();
      for (const node of survivors) {
        const record = listed.find((r) => r.id === cluster.ids.get(node));
        if (Number(record?.status?.timestampMs ?? 0) <= killedAtWall) throw new Error(`${node.name}: no status since the kill`);
        // Without the Kubernetes binaries, a worker's service status names the missing kubelet.
        const message = record?.status?.services.find((s) => s.name === "kubernetes")?.message ?? "";
        if (message.includes("kubelet") !== flipped.get(node)) throw new Error(`${node.name}: kubernetes status not updated yet (${message})`);
      }
    },
    { timeoutMs: 120_000, intervalMs: 50, what: "survivors' role fetch and status push" },
  ).finally(() => {
    // NODECORE_BENCH_LOGS=<dir> keeps each survivor's log of the trial, to see where the time went.
    const logDir = process.env.NODECORE_BENCH_LOGS;
    if (!logDir) return;
    mkdirSync(logDir, { recursive: true });
    for (const node of survivors) {
      const lines = node.logs.slice(logsFrom.get(node)).map((l) => JSON.stringify(l));
      writeFileSync(join(logDir, `trial${n + 1}-${node.name}.log`), [`killed ${leader.name} at ${new Date(killedAtWall).toISOString()}`, ...lines].join("\n") + "\n");
    }
  });
  const nodesWorking = performance.now() - killedAt;
  const elected = survivors
    .flatMap((node) => node.logs.slice(logsFrom.get(node)).filter((l) => l.msg === "elected curator leader"))
    .map((l) => Date.parse(l.time) - killedAtWall)
    .sort((a, b) => a - b)[0];
  console.log(
    `  trial ${n + 1}: killed ${leader.name}; new curator leader after ${elected === undefined ? "?" : s2(elected)}, ` +
      `owner write after ${s2(firstWrite!)}, survivors' role fetch + status push after ${s2(nodesWorking)}`,
  );
  // Back to three voters before the next trial.
  const from = leader.logs.length;
  leader.start();
  await leader.waitForLog((l) => l.msg === "node is UP", { from, timeoutMs: 120_000, what: "UP again" });
  await eventually(
    async () => {
      const voters = (await cluster.etcdMembers(survivors[0]!)).filter((m) => !m.isLearner && m.name !== "");
      if (voters.length !== 3) throw new Error(`${voters.length} voters`);
    },
    { timeoutMs: 120_000, intervalMs: 500, what: "three voters again" },
  );
  await leader.waitForLog((l) => l.msg === "curator serving", { from, timeoutMs: 120_000, what: "curator serving again" });
  return { write: firstWrite!, nodes: nodesWorking, elected: elected ?? Number.NaN };
}

console.log(`failover figures (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, processes on loopback, leader lease TTL ${LEADER_LEASE_TTL_S} s)`);
using dir = tempDir("nodecore-failover-");
const cluster = await formProcessCluster(dir.path, 220);
const owner = loadCredentials(configPaths(cluster.ctlDir), cluster.ownerKeyFile);
const pool = new CuratorPool({ ca: owner.ca, certificate: owner.certificate, privateKey: owner.key.privateKey });
try {
  await latency(pool, cluster, owner.endpoints);
  const results = [];
  for (let n = 0; n < TRIALS; n++) results.push(await trial(cluster, pool, owner.endpoints, n));
  const writes = results.map((r) => r.write);
  const nodes = results.map((r) => r.nodes);
  const elected = results.map((r) => r.elected);
  figure(`leader's node SIGKILLed → new curator leader elected, p50 / max`, `${s2(percentile(elected, 50))} / ${s2(Math.max(...elected))}`, WIDTH);
  figure(`leader's node SIGKILLed → owner's next write (${TRIALS} trials), p50 / max`, `${s2(percentile(writes, 50))} / ${s2(Math.max(...writes))}`, WIDTH);
  figure(`leader's node SIGKILLed → survivors' role fetch + status push, p50 / max`, `${s2(percentile(nodes, 50))} / ${s2(Math.max(...nodes))}`, WIDTH);
} finally {
  pool.close();
  await cluster.stop();
}
