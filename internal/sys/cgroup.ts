// The node's CPU order, in cgroup v2 weights. The kernel's fair scheduler
// shares a busy CPU among the root cgroup's threads (PID 1's, the Kubernetes
// control plane's, the kubelet's: each counts as one at weight 100) and its
// child cgroups (each counts as one, at its cpu.weight). So:
//
//   /sys/fs/cgroup/                 PID 1, kube-apiserver, its controllers, the kubelet …
//   ├── nodecore-etcd      weight ETCD_CPU_WEIGHT: etcd keeps its heartbeats on a busy node
//   └── nodecore-runtime   weight 100: containerd and every pod, together as one thread
//
// etcd gets a cgroup of its own rather than a niceness (a thread's weight):
// a niceness is set thread by thread, and etcd's Go runtime starts threads
// whenever it likes, while a cgroup holds every thread its process ever has.
// Users' pods already share one weight (internal/containerd's cgroup), so
// they never run ahead of the control plane.

import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Where the unified (v2) hierarchy is mounted: the node's own mount, or a hybrid host's. */
export function unifiedCgroupRoot(): string | undefined {
  for (const root of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) {
    if (existsSync(join(root, "cgroup.controllers"))) return root;
  }
  return undefined;
}

/** etcd's cgroup, below the hierarchy's root. */
export const ETCD_CGROUP = "nodecore-etcd";
/**
 * etcd's cpu.weight (1 to 10000; every other process's threads are at 100
 * each): on a CPU that everything wants, etcd gets ten threads' worth, about
 * what a niceness of −10 gives one thread (bench/cpu_weight.ts measures it).
 */
export const ETCD_CPU_WEIGHT = 1000;

export class CgroupPlacementError extends Error {
  override name = "CgroupPlacementError";
}

/**
 * Moves process `pid` (every thread it has, and will have) into cgroup
 * `name` below the unified hierarchy's `root`, with CPU weight `cpuWeight`.
 * The root must offer the cpu controller; it is enabled for the root's
 * children if it is not yet. Throws a CgroupPlacementError naming what
 * failed (the caller says so and lets the process run where it is).
 */
export function placeWithCpuWeight(root: string, name: string, pid: number, cpuWeight: number): void {
  if (!/^[a-z0-9][a-z0-9.-]*$/.test(name)) throw new CgroupPlacementError(`invalid cgroup name ${JSON.stringify(name)}`);
  if (!Number.isInteger(cpuWeight) || cpuWeight < 1 || cpuWeight > 10_000) throw new CgroupPlacementError(`cpu.weight ${cpuWeight} is not an integer from 1 to 10000`);
  const step = (what: string, action: () => void) => {
    try {
      action();
    } catch (error) {
      throw new CgroupPlacementError(`${what}: ${(error as Error).message}`, { cause: error });
    }
  };
  let offered: string[] = [];
  step(`reading ${join(root, "cgroup.controllers")}`, () => (offered = readFileSync(join(root, "cgroup.controllers"), "utf8").trim().split(/\s+/)));
  if (!offered.includes("cpu")) throw new CgroupPlacementError(`the cgroup hierarchy at ${root} offers no cpu controller`);
  const subtree = join(root, "cgroup.subtree_control");
  step(`enabling the cpu controller in ${subtree}`, () => {
    if (!readFileSync(subtree, "utf8").trim().split(/\s+/).includes("cpu")) writeFileSync(subtree, "+cpu");
  });
  const dir = join(root, name);
  step(`making ${dir}`, () => mkdirSync(dir, { recursive: true }));
  step(`setting ${join(dir, "cpu.weight")} to ${cpuWeight}`, () => writeFileSync(join(dir, "cpu.weight"), `${cpuWeight}\n`));
  step(`moving process ${pid} into ${dir}`, () => writeFileSync(join(dir, "cgroup.procs"), `${pid}\n`));
}
