// The launched 3-VM cluster, twice on this host, side by side (issue 46):
// every VM with two vCPUs, as the launcher gave them before it sized VMs to
// the host, and sized to the host (test/launch/vm_sizing.ts: on two cores,
// two vCPUs for node1, the controller, and one for each other node). For
// each, as an owner sees it:
//  - formation: node1 UP → three voting members;
//  - Kubernetes: node1 keeps the controller role, every node gets the worker
//    role → every Node Ready (the launcher's own step);
//  - load: a Deployment of one CPU-bound pod per node (a shell loop) for
//    LOAD_MINUTES, while `kubectl exec` into a sleeping pod is timed every
//    EXEC_EVERY_MS and the apiserver's /readyz is read;
//  - the restarts of node1's controller-manager, scheduler, apiserver and
//    etcd (ctl node services) before the load, and those during it;
//  - the curator elections lost (a node's "lost the curator election" on
//    its console: its lease expired, a leader's term or a follower's place
//    in line, or its etcd stopped answering), summed over the three nodes,
//    from node1 UP to the load, and during it.
// Fresh disks. Prints figures; asserts nothing. One cluster at a time.
//
//   bun bench/vm_sizing_qemu.ts [--minutes N] [--only 2|sized] [--no-build] [--image-dir dir]

import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { TEST_IMAGE_REF } from "../internal/containerd/mod.ts";
import { LEADER_LEASE_TTL_S } from "../internal/curator/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { createCluster, ensureBuilt, formCluster } from "../test/launch/mod.ts";
import { startKubernetes } from "../test/launch/kubernetes_start.ts";
import { sizeVms, thisHost } from "../test/launch/vm_sizing.ts";
import { ownerKubectl, podRunning } from "./owner_kubectl.ts";
import { figure, percentile, qemuAccel, seconds } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf, usageError } from "./args.ts";

const STEP_TIMEOUT_MS = 900_000;
const EXEC_EVERY_MS = 10_000;

const { values } = benchArgs({
  minutes: { type: "string", default: "8", help: "how long each cluster is loaded" },
  only: { type: "string", help: "one variant: 2 (two vCPUs each) or sized (as the launcher sizes them)" },
  ...IMAGE_FLAGS,
});
const minutes = Number(values.minutes);
if (!Number.isFinite(minutes) || minutes <= 0) usageError(`--minutes must be a positive number, not ${JSON.stringify(values.minutes)}`);
if (values.only !== undefined && values.only !== "2" && values.only !== "sized") usageError(`--only is 2 or sized, not ${JSON.stringify(values.only)}`);
const imageDir = imageDirOf(values);
const log = createLogger("bench.vmsizing");
if (!values["no-build"]) await ensureBuilt(log);

interface Row {
  label: string;
  formation: number;
  kubernetes: number;
  execs: number[];
  execFailures: number;
  readyzFailures: number;
  readyzReads: number;
  /** node1's restarts before the load (the start's), and during it. */
  restartsBefore: Record<string, number>;
  restarts: Record<string, number>;
  /** Curator elections lost on the three nodes before the load, and during it. */
  electionsLostBefore: number;
  electionsLost: number;
}

/** How many curator elections the nodes' consoles say were lost so far (a leader's term or a follower's campaign). */
function curatorElectionsLost(consoleLogs: readonly string[]): number {
  let lost = 0;
  for (const file of consoleLogs) {
    if (!existsSync(file)) continue;
    lost += readFileSync(file, "utf8")
      .split("\n")
      .filter((line) => line.includes("lost the curator election")).length;
  }
  return lost;
}

/** node1's components whose restarts are counted. */
const RESTART_NAMES = ["controller-manager", "scheduler", "apiserver", "etcd"] as const;

async function run(label: string, cpus: number | undefined): Promise<Row> {
  const cluster = await createCluster({ name: "benchsize", nodes: 3, quiet: true, imageDir, logger: log.child("launch"), ...(cpus !== undefined ? { cpus } : {}) });
  try {
    let node1Up = 0;
    const formed = await formCluster(cluster, {
      timeoutMs: STEP_TIMEOUT_MS,
      logger: log.child("formation"),
      onStage: (stage) => {
        if (stage === "node1 UP") node1Up = performance.now();
      },
    });
    const formation = performance.now() - node1Up;
    const kubernetes = await startKubernetes(cluster, formed, { timeoutMs: STEP_TIMEOUT_MS, logger: log.child("kubernetes") });
    const { kubeconfig, kubectl } = ownerKubectl(cluster, "60s");
    // startKubernetes wrote the owner's kubeconfig (ctl kubeconfig) as it
    // waited: asking the curator for another under load only risks a
    // dropped call (it did, 2026-11-29, and ended the run before its load).
    copyFileSync(cluster.dir.kubeconfig, kubeconfig);
    const file = join(cluster.dir.path, "load.json");
    const pod = (name: string, command: string) => ({ name, image: TEST_IMAGE_REF, imagePullPolicy: "Never", command: ["sh", "-c", command] });
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: "v1",
        kind: "List",
        items: [
          { apiVersion: "v1", kind: "Pod", metadata: { name: "shell" }, spec: { terminationGracePeriodSeconds: 1, containers: [pod("main", "exec sleep 36000")] } },
          {
            apiVersion: "apps/v1",
            kind: "Deployment",
            metadata: { name: "burn" },
            spec: {
              replicas: 3,
              selector: { matchLabels: { app: "burn" } },
              template: {
                metadata: { labels: { app: "burn" } },
                spec: {
                  terminationGracePeriodSeconds: 1,
                  topologySpreadConstraints: [{ maxSkew: 1, topologyKey: "kubernetes.io/hostname", whenUnsatisfiable: "ScheduleAnyway", labelSelector: { matchLabels: { app: "burn" } } }],
                  containers: [pod("main", "while :; do :; done")],
                },
              },
            },
          },
        ],
      }),
    );
    await kubectl("create", "-f", file);
    await podRunning(kubectl, "shell", { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 2_000, what: "the shell pod Running" });
    // node1's restarts so far, then again after the load: the start's own
    // (a controller-manager that gave up on a busy apiserver at its start)
    // are told apart from those under load. A dropped call is asked again,
    // and said.
    const restartsNow = async (): Promise<Record<string, number>> => {
      for (let attempt = 1; ; attempt++) {
        const listed = await formed.ctl("node", "services", "node1", "-o", "json");
        if (listed.exitCode === 0) {
          const rows = JSON.parse(listed.stdout) as { path: string; restarts: number }[];
          const counted: Record<string, number> = {};
          for (const name of RESTART_NAMES) counted[name] = rows.filter((r) => r.path.endsWith(`.${name}`)).reduce((sum, r) => sum + r.restarts, 0);
          return counted;
        }
        if (attempt >= 5) throw new Error(`ctl node services node1: ${listed.stderr.trim()}`);
        log.warn(`ctl node services node1 failed (try ${attempt} of 5); asking again`, { why: listed.stderr.trim() });
        await Bun.sleep(5_000);
      }
    };
    const restartsBefore = await restartsNow();
    const consoles = cluster.nodes.map((n) => n.files.consoleLog);
    const electionsLostBefore = curatorElectionsLost(consoles);
    log.info(`${label}: under load for ${minutes} minutes`);
    const execs: number[] = [];
    let execFailures = 0;
    let readyzFailures = 0;
    let readyzReads = 0;
    const end = performance.now() + minutes * 60_000;
    while (performance.now() < end) {
      const started = performance.now();
      try {
        await kubectl("exec", "shell", "--", "sh", "-c", "exit 0");
        execs.push(performance.now() - started);
      } catch {
        execFailures++;
      }
      readyzReads++;
      if ((await kubectl("get", "--raw", "/readyz").catch(() => "")).trim() !== "ok") readyzFailures++;
      await Bun.sleep(Math.max(0, EXEC_EVERY_MS - (performance.now() - started)));
    }
    const restartsAfter = await restartsNow();
    const restarts: Record<string, number> = {};
    for (const name of RESTART_NAMES) restarts[name] = restartsAfter[name]! - restartsBefore[name]!;
    const electionsLost = curatorElectionsLost(consoles) - electionsLostBefore;
    return { label, formation, kubernetes, execs, execFailures, readyzFailures, readyzReads, restartsBefore, restarts, electionsLostBefore, electionsLost };
  } finally {
    await cluster.close();
  }
}

const sized = sizeVms(3, thisHost());
const rows: Row[] = [];
if (values.only !== "sized") rows.push(await run("2 vCPUs per VM (before)", 2));
if (values.only !== "2") rows.push(await run(`sized: ${sized.summary}`, undefined));
const host = thisHost();
console.log(
  `\nThree VMs (node1 controller and worker, node2 and node3 workers) on this host (${host.cpus} cores, ${host.memoryMiB} MiB), ${await qemuAccel(imageDir)}, fresh disks; ${minutes} min of load (3 CPU-bound pods)`,
);
for (const row of rows) {
  console.log(`\n${row.label}`);
  figure("node1 UP → three voting members", seconds(row.formation));
  figure("worker roles set → every Node Ready", seconds(row.kubernetes));
  figure(
    `kubectl exec under load: p50 / max (${row.execs.length} ok, ${row.execFailures} failed)`,
    row.execs.length ? `${seconds(percentile(row.execs, 50))} / ${seconds(Math.max(...row.execs))}` : "—",
  );
  figure("apiserver /readyz not ok under load", `${row.readyzFailures} of ${row.readyzReads}`);
  const shown = (r: Record<string, number>) => RESTART_NAMES.map((name) => r[name]).join(" / ");
  figure("node1 restarts before the load (its start): controller-manager / scheduler / apiserver / etcd", shown(row.restartsBefore));
  figure(`node1 restarts during the ${minutes} min of load: controller-manager / scheduler / apiserver / etcd`, shown(row.restarts));
  figure(`curator elections lost (${LEADER_LEASE_TTL_S} s lease), all nodes: node1 UP → the load / during the load`, `${row.electionsLostBefore} / ${row.electionsLost}`);
}
