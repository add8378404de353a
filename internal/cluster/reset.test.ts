// Forgetting the cluster on a real LUKS2 header (cryptsetup on an image
// file: key slots need no device-mapper) and a real ESP directory.

import { describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { storageLayout } from "../localstorage/mod.ts";
import { runCommand } from "../supervisor/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { encryptedPartition } from "./data_storage.ts";
import { forgetCluster } from "./reset.ts";

/** A node's ESP files and a LUKS2 image opened by `key`, under `dir`. */
async function node(dir: string, key: Uint8Array) {
  const layout = storageLayout(join(dir, "root"));
  for (const file of [layout.esp.sealed, layout.esp.heldShares, layout.esp.parameters]) {
    mkdirSync(dirname(file), { recursive: true });
    writeFileSync(file, randomBytes(300));
  }
  const image = join(dir, "data.img");
  await runCommand(["truncate", "-s", "32M", image]);
  await runCommand(["cryptsetup", "luksFormat", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--batch-mode", "--key-file", "-", image], { stdin: key });
  return { layout, image, storage: encryptedPartition(layout, () => image) };
}

describe("a reset", () => {
  test("overwrites and deletes what the node joins with, and --wipe leaves no key slot that any key opens", async () => {
    using dir = tempDir();
    const key = new Uint8Array(randomBytes(32));
    const { layout, image, storage } = await node(dir.path, key);
    expect(await storage.opens!(key)).toBe(true);
    expect(await storage.opens!(new Uint8Array(32))).toBe(false);

    const erased = await forgetCluster({ layout, storage, wipe: true });
    expect(erased).toEqual([
      `the sealed configuration (node half of the disk key, join key): overwritten and deleted (${layout.esp.sealed})`,
      `the shares of other nodes' keys this node held: overwritten and deleted (${layout.esp.heldShares})`,
      `the node parameters: overwritten and deleted (${layout.esp.parameters})`,
      `the data partition's key slots: destroyed (${image})`,
    ]);
    for (const file of [layout.esp.sealed, layout.esp.heldShares, layout.esp.parameters]) expect(existsSync(file)).toBe(false);
    expect(await storage.opens!(key)).toBe(false);
    // Checked as the e2e's disk inspection does: the header lists no key slot.
    const dump = (await runCommand(["cryptsetup", "luksDump", image])).stdout;
    expect(dump).toMatch(/Keyslots:\nTokens:/);
  });

  test("without --wipe the data partition keeps its key slot (its key halves are gone with the node)", async () => {
    using dir = tempDir();
    const key = new Uint8Array(randomBytes(32));
    const { layout, storage } = await node(dir.path, key);
    const erased = await forgetCluster({ layout, storage, wipe: false });
    expect(erased).toHaveLength(3);
    expect(await storage.opens!(key)).toBe(true);
  });
});
