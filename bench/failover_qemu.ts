// Failover figures under qemu (TCG on this machine: slow, and honest about
// it): three VMs, all consensus members. Each trial powers off the VM of the
// curator leader without warning (qemu killed: no shutdown, no FIN), while
// the owner writes in a loop with out/ctl, and measures
//  - power-off → the owner's next successful write (a role change for a
//    survivor; each ctl run is a fresh process, as an operator's would be);
//  - power-off → every survivor's role fetch and status push working again
//    (the role reached the survivor and its status, naming what became of
//    it, reached the new leader);
// then boots the VM again and waits until it votes again.
// Prints p50 and max; asserts nothing. Never run beside another qemu cluster.
//   bun bench/failover_qemu.ts [trials=5] [--no-build]

import { join } from "node:path";
import { OUT_DIR, REPO_ROOT } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { LEADER_LEASE_TTL_S } from "../internal/curator/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { figure, percentile, qemuAccel, seconds } from "./figures.ts";
import { CONSOLE, createCluster, ensureBuilt, formCluster, waitForVoters, type NodeVm } from "../test/launch/mod.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const { values, positional } = benchArgs({ "no-build": { type: "boolean", help: "use the image as built" } }, { name: "trials", default: "5", help: "leader VMs powered off" });
const TRIALS = wholeNumber("trials", positional);
const STEP_TIMEOUT_MS = 600_000;
const ELECTED = /curator\.leadership elected curator leader/;

const logger = createLogger("bench");
const WIDTH = 66;

if (!values["no-build"]) await ensureBuilt(logger);
const cluster = await createCluster({ name: "bench-failover", nodes: 3, subnetIndex: 5, quiet: true, imageDir: join(REPO_ROOT, OUT_DIR), logger: logger.child("launch") });

/** The node that most recently logged that it became the curator leader. */
function currentLeader(): NodeVm | undefined {
  let best: { node: NodeVm; at: number } | undefined;
  for (const node of cluster.nodes) {
    if (node.state !== "running") continue;
    const line = [...node.console.lines].reverse().find((l) => ELECTED.test(l.text));
    if (line && (!best || line.at.getTime() > best.at)) best = { node, at: line.at.getTime() };
  }
  return best?.node;
}

try {
  const formed = await formCluster(cluster, { timeoutMs: STEP_TIMEOUT_MS, logger: logger.child("formation") });
  await formed.ctl("cluster", "info");
  console.log(`failover figures under qemu (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, ${await qemuAccel()}, leader lease TTL ${LEADER_LEASE_TTL_S} s)`);
  const writes: number[] = [];
  const nodes: number[] = [];
  for (let n = 0; n < TRIALS; n++) {
    const leader = await eventually(() => currentLeader() ?? Promise.reject(new Error("no leader logged yet")), { timeoutMs: 60_000, intervalMs: 500 });
    const survivors = cluster.nodes.filter((node) => node !== leader);
    const list = async () => {
      const result = await formed.ctl("node", "list", "--json");
      if (result.exitCode !== 0) throw new Error(result.stderr.trim());
      return JSON.parse(result.stdout) as { id: string; roles: string[]; lastStatusMs?: number; services: { name: string; message: string }[] }[];
    };
    const before = await list();
    const worker = new Map(survivors.map((node) => [node, !before.find((r) => r.id === formed.ids.get(node.name))!.roles.includes("kubernetes-worker")]));
    const offAt = performance.now();
    const offAtWall = Date.now();
    await leader.kill();
    let firstWrite: number | undefined;
    for (const node of survivors) {
      await eventually(
        async () => {
          const result = await formed.ctl("node", "roles", worker.get(node) ? "set" : "unset", formed.ids.get(node.name)!, "kubernetes-worker");
          if (result.exitCode !== 0) throw new Error(result.stderr.trim());
          firstWrite ??= performance.now() - offAt;
        },
        { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 100, what: `owner write for ${node.name}` },
      );
    }
    await eventually(
      async () => {
        const listed = await list();
        for (const node of survivors) {
          const record = listed.find((r) => r.id === formed.ids.get(node.name))!;
          if ((record.lastStatusMs ?? 0) <= offAtWall) throw new Error(`${node.name}: no status since the power-off`);
          const message = record.services.find((s) => s.name === "kubernetes")?.message ?? "";
          if (message.includes("kubelet") !== worker.get(node)) throw new Error(`${node.name}: kubernetes status not updated yet`);
        }
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 100, what: "survivors' role fetch and status push" },
    );
    const working = performance.now() - offAt;
    writes.push(firstWrite!);
    nodes.push(working);
    console.log(`  trial ${n + 1}: powered off ${leader.name}; owner write after ${seconds(firstWrite!)}, survivors' role fetch + status push after ${seconds(working)}`);
    await leader.start();
    await leader.waitForConsole(CONSOLE.nodeUp, STEP_TIMEOUT_MS);
    await waitForVoters(formed.ctl, 3, STEP_TIMEOUT_MS);
    await leader.waitForConsole(/curator serving/, STEP_TIMEOUT_MS);
  }
  figure(`leader VM powered off → owner's next write (${TRIALS} trials), p50 / max`, `${seconds(percentile(writes, 50))} / ${seconds(Math.max(...writes))}`, WIDTH);
  figure(`leader VM powered off → survivors' role fetch + status push, p50 / max`, `${seconds(percentile(nodes, 50))} / ${seconds(Math.max(...nodes))}`, WIDTH);
} finally {
  await cluster.close();
}
