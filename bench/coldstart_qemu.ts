// Cold-start figures under qemu (KVM where it works; TCG on this machine): three encrypted
// consensus VMs are all powered off, then powered on, and come back by
// combining the threshold shares they hold for each other (README, "Cold
// start"). Measures, for two full stops:
//  - all three powered on together → the cluster healthy;
//  - two powered on, the third 60 s later → the cluster healthy (from the
//    first power-on, and from the late node's).
// "Healthy" is judged from fresh evidence only (statuses in etcd survive
// the stop): every node logs "node is UP" after its power-on, every node's
// status is newer than the power-on and shows a voting etcd member, and an
// owner write (a node label) is answered. Prints figures; asserts nothing.
// Never run beside another qemu cluster.
//   bun bench/coldstart_qemu.ts [--no-build]

import { join } from "node:path";
import { OUT_DIR, REPO_ROOT } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { figure, qemuAccel, seconds } from "./figures.ts";
import { CONSOLE, createCluster, ensureBuilt, formCluster, type FormedCluster } from "../test/launch/mod.ts";
import { benchArgs } from "./args.ts";

const { values } = benchArgs({ "no-build": { type: "boolean", help: "use the image as built" } });

const STEP_TIMEOUT_MS = 600_000;
const LATE_MS = 60_000;
const POLL_MS = 500;
const WIDTH = 70;
const SHARES_MADE = /cold-start shares made; the cluster half is off the ESP/;
const FROM_SHARES = /cluster half is whole again from its shares/;

const logger = createLogger("bench");
if (!values["no-build"]) await ensureBuilt(logger);
const cluster = await createCluster({ name: "bench-coldstart", nodes: 3, subnetIndex: 7, quiet: true, imageDir: join(REPO_ROOT, OUT_DIR), logger: logger.child("launch") });

/** Waits until the cluster is healthy by evidence from after `sinceWall` (see the header); returns when. */
async function healthySince(formed: FormedCluster, sinceWall: number): Promise<number> {
  for (const node of cluster.nodes) {
    await eventually(
      () => {
        // Each boot has a console of its own: this boot's lines.
        const lines = node.console.lines;
        if (!lines.some((l) => FROM_SHARES.test(l.text))) throw new Error(`${node.name} has not combined its shares`);
        if (!lines.some((l) => CONSOLE.nodeUp.test(l.text))) throw new Error(`${node.name} is not UP`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: `${node.name} back` },
    );
  }
  await eventually(
    async () => {
      const listed = await formed.ctl("node", "list", "--json");
      if (listed.exitCode !== 0) throw new Error(listed.stderr.trim());
      const nodes = JSON.parse(listed.stdout) as { id: string; lastStatusMs?: number; services: { name: string; state: string }[] }[];
      for (const node of nodes) {
        if ((node.lastStatusMs ?? 0) <= sinceWall) throw new Error(`${node.id}: no status since the power-on`);
        if (!node.services.some((s) => s.name === "consensus" && s.state === "voter")) throw new Error(`${node.id}: not a voter yet`);
      }
      const write = await formed.ctl("node", "label", nodes[0]!.id, `coldstart-bench=${sinceWall}`);
      if (write.exitCode !== 0) throw new Error(write.stderr.trim());
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the cluster healthy" },
  );
  return performance.now();
}

async function stopAll(): Promise<void> {
  await Promise.all(cluster.nodes.map((node) => node.stop({ clean: true })));
}

try {
  const formed = await formCluster(cluster, { timeoutMs: STEP_TIMEOUT_MS, logger: logger.child("formation") });
  // The owner's ctl learns every member's address from the cluster; until
  // then it knows only node1, which may be the one still powered off.
  await eventually(
    async () => {
      const info = await formed.ctl("cluster", "info", "--json");
      if (info.exitCode !== 0) throw new Error(info.stderr.trim());
      const curators = (JSON.parse(info.stdout) as { curators: string[] }).curators;
      if (curators.length !== cluster.nodes.length) throw new Error(`ctl knows ${curators.length} curators`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "ctl cluster info" },
  );
  for (const node of cluster.nodes) await node.waitForConsole(SHARES_MADE, STEP_TIMEOUT_MS); // first boots: the lines are there
  console.log(`cold-start figures under qemu (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, ${await qemuAccel()}), 3 consensus members, threshold 2 of 2`);

  await stopAll();
  let wall = Date.now();
  let started = performance.now();
  await Promise.all(cluster.nodes.map((node) => node.start()));
  const together = (await healthySince(formed, wall)) - started;
  figure("all three powered on together → healthy", seconds(together), WIDTH);

  await stopAll();
  const [late, ...early] = [cluster.nodes[1]!, cluster.nodes[0]!, cluster.nodes[2]!];
  wall = Date.now();
  started = performance.now();
  await Promise.all(early.map((node) => node.start()));
  await Bun.sleep(LATE_MS);
  const lateStarted = performance.now();
  await late.start();
  const done = await healthySince(formed, wall);
  figure(`two powered on, ${late.name} ${LATE_MS / 1000} s later → healthy (from the first)`, seconds(done - started), WIDTH);
  figure(`the same, from the late node's power-on`, seconds(done - lateStarted), WIDTH);
} finally {
  await cluster.close();
}
