// The runtime's cgroup: containerd, its shims and every container live below
// one cgroup v2 directory, so that "no container process is left" is a fact
// the kernel states (cgroup.events: populated 0), and stopping them all is
// one write (cgroup.kill, Linux 5.14+).

import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { sleep } from "../supervisor/mod.ts";

/** Where the unified (v2) hierarchy is mounted: the node's own mount, or a hybrid host's. */
export function unifiedCgroupRoot(): string | undefined {
  for (const root of ["/sys/fs/cgroup", "/sys/fs/cgroup/unified"]) {
    if (existsSync(join(root, "cgroup.controllers"))) return root;
  }
  return undefined;
}

/** Every cgroup directory at and below `dir`, deepest first. */
function cgroupsBelow(dir: string): string[] {
  const found: string[] = [];
  const walk = (d: string): void => {
    for (const entry of readdirSync(d, { withFileTypes: true })) if (entry.isDirectory()) walk(join(d, entry.name));
    found.push(d);
  };
  if (existsSync(dir)) walk(dir);
  return found;
}

/** The pids in `dir` and below. */
export function processesIn(dir: string): number[] {
  const pids: number[] = [];
  for (const cgroup of cgroupsBelow(dir)) {
    try {
      for (const line of readFileSync(join(cgroup, "cgroup.procs"), "utf8").split("\n")) if (line) pids.push(Number(line));
    } catch {
      // Removed while we looked.
    }
  }
  return pids;
}

/** Whether any process is in `dir` or below (cgroup.events "populated"). */
function populated(dir: string): boolean {
  try {
    return /^populated 1$/m.test(readFileSync(join(dir, "cgroup.events"), "utf8"));
  } catch {
    return false;
  }
}

/** Moves `pid` into `dir` (created if missing). */
export function joinCgroup(dir: string, pid: number): void {
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "cgroup.procs"), `${pid}\n`);
}

/**
 * Makes `dir` a cgroup below the hierarchy's `root` in which child cgroups
 * get every controller the root offers: each cgroup from the root down to
 * `dir` delegates them in its cgroup.subtree_control (cgroup v2 enables a
 * controller for a child only when its parent delegates it). The kubelet
 * needs this of its cgroup root before it starts, and puts each pod below.
 * A cgroup on the way that holds processes itself cannot delegate (the
 * "no internal processes" rule); the write then fails, naming it.
 */
export function delegatingCgroup(root: string, dir: string): void {
  const controllers = readFileSync(join(root, "cgroup.controllers"), "utf8").trim().split(/\s+/).filter(Boolean);
  const parts = dir.slice(root.length).split("/").filter(Boolean);
  let current = root;
  for (const part of ["", ...parts]) {
    current = part ? join(current, part) : current;
    mkdirSync(current, { recursive: true });
    const offered = readFileSync(join(current, "cgroup.controllers"), "utf8")
      .trim()
      .split(/\s+/)
      .filter((c) => controllers.includes(c));
    const delegated = readFileSync(join(current, "cgroup.subtree_control"), "utf8").trim().split(/\s+/).filter(Boolean);
    const missing = offered.filter((c) => !delegated.includes(c));
    if (missing.length === 0) continue;
    try {
      writeFileSync(join(current, "cgroup.subtree_control"), missing.map((c) => `+${c}`).join(" "));
    } catch (error) {
      throw new Error(`could not delegate the controllers ${missing.join(", ")} in ${current}: ${(error as Error).message}`, { cause: error });
    }
  }
}

export class CgroupCleanupError extends Error {
  override name = "CgroupCleanupError";
}

const GONE_POLL_MS = 50;
const GONE_WAIT_MS = 10_000;

/**
 * Kills every process in `dir` and below and removes the cgroups. Returns
 * how many processes there were. Throws if some are still there after
 * GONE_WAIT_MS (a process stuck in the kernel): the caller says so.
 */
export async function killCgroup(dir: string, signal?: AbortSignal): Promise<number> {
  if (!existsSync(dir)) return 0;
  const pids = processesIn(dir);
  if (pids.length > 0) {
    try {
      writeFileSync(join(dir, "cgroup.kill"), "1");
    } catch {
      // A kernel without cgroup.kill: one process at a time.
      for (const pid of pids) {
        try {
          process.kill(pid, "SIGKILL");
        } catch {
          // Already gone.
        }
      }
    }
    const deadline = Date.now() + GONE_WAIT_MS;
    while (populated(dir) && processesIn(dir).length > 0) {
      if (Date.now() > deadline) throw new CgroupCleanupError(`processes still in ${dir} ${GONE_WAIT_MS / 1000} s after SIGKILL: ${processesIn(dir).join(", ")}`);
      await sleep(GONE_POLL_MS, signal);
    }
  }
  // An emptied cgroup can stay busy for a moment (the kernel releases it
  // after its last task is reaped): retry, deepest first, until it is gone.
  const deadline = Date.now() + GONE_WAIT_MS;
  for (;;) {
    for (const cgroup of cgroupsBelow(dir)) {
      try {
        rmdirSync(cgroup);
      } catch {
        // Busy still; the next round takes it.
      }
    }
    if (!existsSync(dir)) break;
    if (Date.now() > deadline) throw new CgroupCleanupError(`could not remove ${dir} within ${GONE_WAIT_MS / 1000} s of emptying it`);
    await sleep(GONE_POLL_MS, signal);
  }
  return pids.length;
}
