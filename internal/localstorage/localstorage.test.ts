// The data partition on a real loop device with real dm-crypt and ext4.
// Needs root, losetup, cryptsetup (installed by test/setup.sh) and a kernel
// with device-mapper. Where the host kernel has none (as on the development
// VMs), these tests are skipped and say so; the qemu e2e test runs the same
// code against the node's own kernel.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { randomBytes } from "node:crypto";
import { existsSync, readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { captureLogger } from "../log/mod.ts";
import { runCommand } from "../supervisor/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { closeDataPartition, findPartition, mountDataPartition, storageLayout, blockDevices } from "./mod.ts";

const DISK_BYTES = 64 * 1024 * 1024;
const HAS_DEVICE_MAPPER = existsSync("/proc/misc") && readFileSync("/proc/misc", "utf8").includes("device-mapper");
if (!HAS_DEVICE_MAPPER) console.warn("localstorage: host kernel has no device-mapper; data partition tests skipped (the qemu e2e covers them)");

const dir = tempDir("nodecore-storage-");
const mapperName = `nodecore-test-${process.pid}`;
let loop = "";

beforeAll(async () => {
  if (!HAS_DEVICE_MAPPER) return;
  const image = join(dir.path, "disk.img");
  writeFileSync(image, "");
  await runCommand(["truncate", "-s", String(DISK_BYTES), image]);
  loop = (await runCommand(["losetup", "--find", "--show", image])).stdout.trim();
});

afterAll(async () => {
  await runCommand(["umount", join(dir.path, "root", "data")]).catch(() => {});
  await runCommand(["cryptsetup", "close", mapperName]).catch(() => {});
  if (loop) await runCommand(["losetup", "-d", loop]).catch(() => {});
  dir[Symbol.dispose]();
});

describe.skipIf(!HAS_DEVICE_MAPPER)("data partition", () => {
  const layout = storageLayout(join(dir.path, "root"));
  const key = new Uint8Array(randomBytes(32));
  const options = () => ({
    device: loop,
    mountpoint: layout.data.path,
    mapperName,
    key,
    formattedMarker: layout.data.formatted,
    logger: captureLogger("storage").logger,
  });

  test("is encrypted and formatted on first use, then mounted without formatting, keeping its files", async () => {
    expect(await mountDataPartition(options())).toBe("formatted");
    const dump = await runCommand(["cryptsetup", "luksDump", loop]);
    expect(dump.stdout).toContain("Version:       \t2");
    mkdirSync(layout.data.node.path, { recursive: true });
    writeFileSync(join(layout.data.node.path, "keep.txt"), "written on first boot");
    expect(existsSync(layout.data.formatted)).toBe(true);
    await closeDataPartition(layout.data.path, mapperName);
    expect(existsSync(join(layout.data.node.path, "keep.txt"))).toBe(false);

    expect(await mountDataPartition(options())).toBe("mounted");
    expect(readFileSync(join(layout.data.node.path, "keep.txt"), "utf8")).toBe("written on first boot");
    await closeDataPartition(layout.data.path, mapperName);
  });

  test("a wrong key is refused and the data stays intact", async () => {
    const wrong = { ...options(), key: new Uint8Array(randomBytes(32)) };
    await expect(mountDataPartition(wrong)).rejects.toThrow("does not open with this node's key (wrong key); leaving it untouched");
    expect(await mountDataPartition(options())).toBe("mounted");
    expect(readFileSync(join(layout.data.node.path, "keep.txt"), "utf8")).toBe("written on first boot");
    await closeDataPartition(layout.data.path, mapperName);
  });

  test("a missing device or a short key is a clear error", async () => {
    await expect(mountDataPartition({ ...options(), device: "/dev/does-not-exist" })).rejects.toThrow("data partition /dev/does-not-exist does not exist");
    await expect(mountDataPartition({ ...options(), key: new Uint8Array(16) })).rejects.toThrow("data partition key must be 32 bytes, got 16");
  });
});

describe("partitions", () => {
  test("are found by GPT partition name from sysfs", () => {
    const sysfs = join(dir.path, "sys");
    for (const [name, uevent] of [
      ["vda", "MAJOR=254\nDEVNAME=vda\nDEVTYPE=disk\n"],
      ["vda1", "MAJOR=254\nDEVNAME=vda1\nDEVTYPE=partition\nPARTN=1\nPARTNAME=ESP\n"],
      ["vda2", "MAJOR=254\nDEVNAME=vda2\nDEVTYPE=partition\nPARTN=2\nPARTNAME=DATA\n"],
    ] as const) {
      mkdirSync(join(sysfs, name), { recursive: true });
      writeFileSync(join(sysfs, name, "uevent"), uevent);
    }
    const devices = blockDevices(sysfs, "/dev");
    expect(findPartition("DATA", devices)?.path).toBe("/dev/vda2");
    expect(findPartition("ESP", devices)?.path).toBe("/dev/vda1");
    expect(findPartition("MISSING", devices)).toBeUndefined();
  });
});
