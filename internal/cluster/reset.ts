// Forgetting the cluster (NodeManagement.Reset, `ctl node reset`): what the
// node keeps on its ESP to come back on its own is overwritten and deleted,
// and with wipe its data partition can never be opened again.
//
//   sealed configuration (node half, join key, cold-start key), the shares
//   of other nodes' halves it holds, its parameters ─▶ zeros, fsync, unlink
//   wipe: the data partition's key slots ─▶ destroyed (cryptsetup luksErase;
//         a node process's stand-in forgets its key check)
//   the ESP's free space ─▶ overwritten (a VM's FAT keeps deleted bytes)
//
// The node reboots afterwards with nothing to join with: it boots into "no
// parameters" unless its operator gives it new ones.

import { closeSync, existsSync, fsyncSync, openSync, rmSync, statSync, writeSync } from "node:fs";
import type { StorageLayout } from "../localstorage/mod.ts";
import type { DataStorage } from "./data_storage.ts";

/** Overwrites a file with zeros, on disk, then deletes it; false if there was none. */
export function zeroAndDelete(path: string): boolean {
  if (!existsSync(path)) return false;
  const size = statSync(path).size;
  const fd = openSync(path, "r+");
  try {
    writeSync(fd, Buffer.alloc(size), 0, size, 0);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  rmSync(path);
  return true;
}

/** Makes the node forget its cluster; returns what was erased, one line each. */
export async function forgetCluster(options: { layout: StorageLayout; storage: DataStorage; wipe: boolean; scrubEsp?: () => Promise<void> }): Promise<string[]> {
  const { esp } = options.layout;
  const erased: string[] = [];
  for (const [path, what] of [
    [esp.sealed, "the sealed configuration (node half of the disk key, join key)"],
    [esp.heldShares, "the shares of other nodes' keys this node held"],
    [esp.parameters, "the node parameters"],
  ] as const) {
    if (zeroAndDelete(path)) erased.push(`${what}: overwritten and deleted (${path})`);
  }
  if (options.wipe) {
    if (!options.storage.erase) throw new Error("this node's data storage cannot be erased");
    erased.push(await options.storage.erase());
  }
  if (options.scrubEsp) {
    await options.scrubEsp();
    erased.push("the ESP's free space: overwritten");
  }
  return erased;
}
