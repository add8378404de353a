// Files only root may read (keys, kubeconfigs), on tmpfs: written whole and
// renamed into place, so that a component starting meanwhile never reads
// half a key.

import { chmodSync, mkdirSync, renameSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/**
 * Writes each file of `contents` into `dir` (created 0700) under its name
 * in `names` (CONTROLLER_FILES, KUBELET_FILES), every file 0600.
 */
export function writePrivateFiles<K extends string>(dir: string, names: Readonly<Record<K, string>>, contents: Readonly<Record<K, string>>): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  for (const key of Object.keys(contents) as K[]) {
    const path = join(dir, names[key]);
    const text = contents[key];
    writeFileSync(`${path}.new`, text, { mode: 0o600 });
    renameSync(`${path}.new`, path);
  }
}
