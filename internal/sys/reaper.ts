// Reaping orphans. As PID 1, every orphaned process on the node becomes our
// child and stays a zombie until we wait for it. bun waits only for the
// processes it spawned itself, so the reaper waits for every other zombie
// child — and never for one of bun's, whose exit status bun still needs.

import { readdirSync, readFileSync } from "node:fs";
import { reap } from "./libc.ts";

/** State and parent of a process from /proc/<pid>/stat, or undefined if it is gone. */
export function processState(pid: number): { state: string; ppid: number } | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  } catch {
    return undefined;
  }
  // The command name is in parentheses and may contain spaces: parse after the last ')'.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return { state: fields[0] ?? "?", ppid: Number(fields[1]) };
}

/**
 * Waits for every zombie child of this process that `isOwn` does not claim.
 * Returns the pids reaped.
 */
export function reapOrphans(isOwn: (pid: number) => boolean): number[] {
  const reaped: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid <= 1 || isOwn(pid)) continue;
    const info = processState(pid);
    if (info?.state === "Z" && info.ppid === process.pid && reap(pid)) reaped.push(pid);
  }
  return reaped;
}
