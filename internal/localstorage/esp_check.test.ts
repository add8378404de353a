// The ESP's check before it is mounted (checkESP): fsck.fat on a FAT image
// of our own, clean, and with a cluster chain that no file owns any more,
// as a power cut in the middle of a write leaves one; and a partition that
// is no FAT at all, which fsck.fat cannot check (it exits 1 for that too).

import { expect, test } from "bun:test";
import { openSync, readFileSync, writeFileSync, closeSync, ftruncateSync } from "node:fs";
import { join } from "node:path";
import { runCommand } from "../supervisor/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { checkESP } from "./mod.ts";

async function fatImage(path: string): Promise<void> {
  const fd = openSync(path, "w");
  ftruncateSync(fd, 64 * 1024 * 1024);
  closeSync(fd);
  await runCommand(["mkfs.vfat", "-F", "32", path]);
}

test("a clean ESP passes its check unchanged", async () => {
  using dir = tempDir("nodecore-esp-check-");
  const image = join(dir.path, "esp.img");
  await fatImage(image);
  expect(await checkESP(image)).toEqual({ state: "clean" });
});

test("clusters no file owns are found and given back, and the ESP is clean afterwards", async () => {
  using dir = tempDir("nodecore-esp-check-");
  const image = join(dir.path, "esp.img");
  await fatImage(image);
  const file = join(dir.path, "initramfs.tmp");
  writeFileSync(file, new Uint8Array(256 * 1024).fill(7));
  await runCommand(["mcopy", "-i", image, file, "::KERNEL.TMP"]);
  // The directory entry goes, its clusters stay allocated: what a power cut mid-write can leave.
  const bytes = readFileSync(image);
  const entry = bytes.indexOf(Buffer.from("KERNEL  TMP"));
  expect(entry).toBeGreaterThan(0);
  bytes[entry] = 0xe5;
  writeFileSync(image, bytes);
  const repaired = await checkESP(image);
  expect(repaired.state).toBe("repaired");
  expect(repaired.state !== "clean" && repaired.said).toMatch(/Reclaimed \d+ unused clusters/);
  expect(await checkESP(image)).toEqual({ state: "clean" });
});

test("a partition that holds no FAT file system is not called repaired", async () => {
  using dir = tempDir("nodecore-esp-check-");
  const image = join(dir.path, "zeros.img");
  const fd = openSync(image, "w");
  ftruncateSync(fd, 8 * 1024 * 1024);
  closeSync(fd);
  const check = await checkESP(image);
  expect(check.state).toBe("unrepaired");
  expect(check.state !== "clean" && check.said).toMatch(/sector size/);
});
