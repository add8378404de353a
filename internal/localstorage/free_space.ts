// Free space on the data partition: how much there is, in words an operator
// reads, and a wait for enough of it before something that writes starts.
//
// etcd on a full file system dies at its next commit ("cannot commit tx: no
// space left on device"). Started again on a disk that is still full, it
// would die again at once: a crash loop that floods the logs and says
// nothing about the cause. So etcd starts only when there is room, and until
// then the node says once, plainly, what it waits for (consensus'
// runEtcdMember uses this).

import { statfsSync } from "node:fs";
import { formatBytes } from "../log/mod.ts";
import { sleep } from "../supervisor/mod.ts";

export interface FreeSpace {
  path: string;
  /** Bytes an unprivileged writer may still use (statfs f_bavail). */
  freeBytes: number;
  totalBytes: number;
}

export function freeSpace(path: string): FreeSpace {
  const fs = statfsSync(path);
  return { path, freeBytes: fs.bavail * fs.bsize, totalBytes: fs.blocks * fs.bsize };
}

/** "0 B free of 512 MiB at /data". */
export function describeSpace(space: FreeSpace): string {
  return `${formatBytes(space.freeBytes)} free of ${formatBytes(space.totalBytes)} at ${space.path}`;
}

/** How often a wait for space looks again. */
export const FREE_SPACE_POLL_MS = 1_000;

export interface SpaceWaitOptions {
  signal: AbortSignal;
  /** Told once when the wait begins (with what is free) and once when it ends. */
  onFull?: (space: FreeSpace) => void;
  onFreed?: (space: FreeSpace, waitedMs: number) => void;
  pollMs?: number;
}

/** Resolves once `path`'s file system has at least `minBytes` free; rejects when the signal aborts. */
export async function waitForFreeSpace(path: string, minBytes: number, options: SpaceWaitOptions): Promise<FreeSpace> {
  const enough = (space: FreeSpace) => space.freeBytes >= minBytes;
  let space = freeSpace(path);
  if (enough(space)) return space;
  const began = performance.now();
  options.onFull?.(space);
  while (!enough(space)) {
    await sleep(options.pollMs ?? FREE_SPACE_POLL_MS, options.signal);
    space = freeSpace(path);
  }
  options.onFreed?.(space, performance.now() - began);
  return space;
}
