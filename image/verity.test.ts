// The verified system image: the same squashfs gives the same bytes and
// root hash, the image passes veritysetup's own check against the
// parameters the slot's command line will carry, and one changed byte
// anywhere in it fails that check.

import { describe, expect, test } from "bun:test";
import { closeSync, mkdirSync, openSync, readFileSync, statSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../internal/testing/mod.ts";
import { parseSystemImageParameter, formatSystemImageParameter, VERITY_BLOCK_BYTES } from "../internal/localstorage/mod.ts";
import { run } from "./exec.ts";
import { buildVerifiedImage, verifyImage } from "./verity.ts";

async function squashfs(dir: string): Promise<string> {
  const tree = join(dir, "tree");
  mkdirSync(join(tree, "usr/bin"), { recursive: true });
  // Incompressible, so that the image spans many blocks.
  writeFileSync(join(tree, "usr/bin/tool"), Buffer.from(new Bun.CryptoHasher("sha512").update("seed").digest()).toString("hex").repeat(4000));
  writeFileSync(join(tree, "usr/bin/other"), crypto.getRandomValues(new Uint8Array(300_000)));
  const image = join(dir, "system.squashfs");
  await run(["mksquashfs", tree, image, "-noappend", "-comp", "zstd", "-all-root", "-mkfs-time", "0", "-all-time", "0", "-no-xattrs", "-quiet"]);
  return image;
}

function flipByte(path: string, offset: number): void {
  const byte = readFileSync(path).subarray(offset, offset + 1);
  const fd = openSync(path, "r+");
  writeSync(fd, Buffer.from([byte[0]! ^ 0x01]), 0, 1, offset);
  closeSync(fd);
}

describe("the verified system image", () => {
  test("passes its own check, and its parameters survive the command line", async () => {
    using dir = tempDir("nodecore-verity-");
    const data = await squashfs(dir.path);
    const image = join(dir.path, "system");
    const parameters = await buildVerifiedImage(data, image);
    expect(parameters.hashOffset).toBe(statSync(data).size);
    expect(parameters.dataBlocks * VERITY_BLOCK_BYTES).toBe(statSync(data).size);
    expect(statSync(image).size).toBeGreaterThan(parameters.hashOffset);
    expect(parseSystemImageParameter(formatSystemImageParameter(parameters).split("=")[1]!)).toEqual(parameters);
    await verifyImage(image, parameters);
  });

  test("is the same bytes, and the same root hash, when built twice", async () => {
    using dir = tempDir("nodecore-verity-");
    const data = await squashfs(dir.path);
    const first = await buildVerifiedImage(data, join(dir.path, "one"));
    const second = await buildVerifiedImage(data, join(dir.path, "two"));
    expect(second).toEqual(first);
    expect(readFileSync(join(dir.path, "two")).equals(readFileSync(join(dir.path, "one")))).toBe(true);
  });

  test("fails its check when one byte changes, in the data or in the hash tree", async () => {
    using dir = tempDir("nodecore-verity-");
    const data = await squashfs(dir.path);
    const image = join(dir.path, "system");
    const parameters = await buildVerifiedImage(data, image);
    const clean = readFileSync(image);
    for (const offset of [0, Math.floor(parameters.hashOffset / 2), parameters.hashOffset - 1, statSync(image).size - 1]) {
      writeFileSync(image, clean);
      flipByte(image, offset);
      await expect(verifyImage(image, parameters)).rejects.toThrow(/veritysetup/);
    }
  });

  test("fails against another root hash", async () => {
    using dir = tempDir("nodecore-verity-");
    const image = join(dir.path, "system");
    const parameters = await buildVerifiedImage(await squashfs(dir.path), image);
    const wrong = { ...parameters, rootHash: parameters.rootHash.replace(/^./, (c) => (c === "0" ? "1" : "0")) };
    await expect(verifyImage(image, wrong)).rejects.toThrow(/veritysetup/);
  });
});
