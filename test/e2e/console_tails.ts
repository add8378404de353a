// What the VMs said while an e2e step failed: the last lines of every node
// console written to since the step began. CI keeps only its log's tail, so
// the runner's failures list carries them (run.ts).

import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "../../image/mod.ts";
import { CLUSTER_DIRS } from "../launch/mod.ts";

/** Lines of each node console kept with a failure. */
export const CONSOLE_TAIL_LINES = 8;

/** Where the launcher keeps every cluster's directory, and so each <node>.console.log. */
export const CLUSTERS_ROOT = join(REPO_ROOT, CLUSTER_DIRS);

/**
 * The last lines of every <cluster>/<node>.console.log under root modified
 * since sinceMs (wall clock), each indented under a line naming it; empty
 * when there is none.
 */
export function consoleTails(sinceMs: number, root = CLUSTERS_ROOT, lines = CONSOLE_TAIL_LINES): string[] {
  if (!existsSync(root)) return [];
  const tails: string[] = [];
  for (const cluster of readdirSync(root).sort()) {
    const dir = join(root, cluster);
    let files: string[];
    try {
      files = readdirSync(dir).filter((f) => f.endsWith(".console.log"));
    } catch {
      continue;
    }
    for (const file of files.sort()) {
      const path = join(dir, file);
      if (statSync(path).mtimeMs < sinceMs) continue;
      const text = readFileSync(path, "utf8")
        .replace(/\x1b\[[0-9;?]*[A-Za-z]/g, "")
        .split("\n")
        .map((l) => l.trimEnd())
        .filter((l) => l.length > 0);
      tails.push(`  ${cluster}/${file.replace(".console.log", "")}, its last lines:`, ...text.slice(-lines).map((l) => `    ${l.slice(0, 240)}`));
    }
  }
  return tails;
}
