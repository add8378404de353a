// Three-node qemu cluster formation, as the e2e and `bun run cluster` form
// it (test/launch/cluster_formation.ts): first VM start → every node UP and
// three voting etcd members, with the time each stage took. Fresh disks
// every run. Prints figures; asserts nothing.
//
//   bun bench/formation.ts [--runs N] [--cpus N] [--no-build] [--image-dir dir]
//
// One cluster at a time (three VMs on this machine's two cores already).

import { join } from "node:path";
import { parseArgs } from "node:util";
import { DEFAULT_CPUS, OUT_DIR, REPO_ROOT } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { createCluster, ensureBuilt, formCluster, type FormationStage } from "../test/launch/mod.ts";
import { qemuAccel, spread } from "./figures.ts";

const NODES = 3;
const STEP_TIMEOUT_MS = 300_000;

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "3" },
    "no-build": { type: "boolean", default: false },
    "image-dir": { type: "string" },
    cpus: { type: "string" },
  },
  strict: true,
});
const runs = Number(values.runs);
if (!Number.isInteger(runs) || runs < 1) throw new Error(`--runs must be a whole number of at least 1, not ${values.runs}`);
const cpus = values.cpus === undefined ? DEFAULT_CPUS : Number(values.cpus);
if (!Number.isInteger(cpus) || cpus < 1) throw new Error(`--cpus must be a whole number of at least 1, not ${values.cpus}`);
const imageDir = values["image-dir"] ?? join(REPO_ROOT, OUT_DIR);
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
