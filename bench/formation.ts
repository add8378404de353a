// Three-node qemu cluster formation, as the e2e and `bun run cluster` form
// it (test/launch/cluster_formation.ts): first VM start → every node UP and
// three voting etcd members, with the time each stage took. Fresh disks
// every run. Prints figures; asserts nothing.
//
//   bun bench/formation.ts [--runs N] [--cpus N] [--no-build] [--image-dir dir]
//
// One cluster at a time (three VMs on this machine's two cores already).

import { join } from "node:path";
import { DEFAULT_CPUS } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { createCluster, ensureBuilt, formCluster, type FormationStage } from "../test/launch/mod.ts";
import { qemuAccel, spread } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf, wholeNumber } from "./args.ts";

const NODES = 3;
const STEP_TIMEOUT_MS = 300_000;

const { values } = benchArgs({
  runs: { type: "string", default: "3", help: "formations, each on fresh disks" },
  cpus: { type: "string", help: `vCPUs per VM (default ${DEFAULT_CPUS})` },
  ...IMAGE_FLAGS,
});
const runs = wholeNumber("--runs", values.runs);
const cpus = values.cpus === undefined ? DEFAULT_CPUS : wholeNumber("--cpus", values.cpus);
const imageDir = imageDirOf(values);
const log = createLogger("bench.formation");

/** Stage → ms after the first VM started; "formed" is the last stage. */
type Stages = Map<FormationStage, number>;

async function formOnce(run: number): Promise<Stages> {
  const cluster = await createCluster({ name: "bench3", nodes: NODES, quiet: true, cpus, imageDir, logger: log.child("launch") });
  try {
    const stages: Stages = new Map();
    let started: number | undefined;
    await formCluster(cluster, {
      timeoutMs: STEP_TIMEOUT_MS,
      logger: log.child("formation"),
      onStart: () => (started ??= performance.now()),
      onStage: (stage) => stages.set(stage, performance.now() - started!),
    });
    log.info(`run ${run}: formed`, { seconds: ((stages.get("voters") ?? 0) / 1000).toFixed(1) });
    return stages;
  } finally {
    await cluster.close();
  }
}

if (!values["no-build"]) await ensureBuilt(log);
const results: Stages[] = [];
for (let i = 1; i <= runs; i++) results.push(await formOnce(i));

const order: FormationStage[] = ["node1 UP", "owner took ownership", "every node registered", "every node UP", "consensus roles given", "voters"];
const lines = [
  "",
  `three-node qemu formation (${await qemuAccel(imageDir)}, ${cpus} vCPU${cpus === 1 ? "" : "s"} per VM, fresh disks): seconds after the first VM started, min / median / max of ${runs} run${runs === 1 ? "" : "s"}`,
  ...order.map((stage) => `  ${stage.padEnd(24)} ${spread(results.map((r) => r.get(stage)!))}`),
  "  stage lengths",
  ...order.slice(1).map((stage, i) => `    ${order[i]} → ${stage}`.padEnd(52) + spread(results.map((r) => r.get(stage)! - r.get(order[i]!)!))),
  `  formed (${NODES} UP, ${NODES} voters): ${results.map((r) => `${(r.get("voters")! / 1000).toFixed(1)} s`).join(", ")}`,
  "",
];
process.stdout.write(lines.join("\n"));
