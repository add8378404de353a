// Files only root may read (keys, kubeconfigs), on tmpfs: written whole and
// renamed into place, so that a component starting meanwhile never reads
// half a key.

import { chmodSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Writes each `name → contents` into `dir` (created 0700), every file 0600. */
export function writePrivateFiles(dir: string, files: Record<string, string>): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  for (const [name, contents] of Object.entries(files)) {
    const path = join(dir, name);
    writeFileSync(`${path}.new`, contents, { mode: 0o600 });
    renameSync(`${path}.new`, path);
  }
}
