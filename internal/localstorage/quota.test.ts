// Project quotas on a real ext4 in a loop file, mounted as the node mounts
// its data partition (prjquota). Needs root and losetup, as the data
// partition tests do, and for the limits a kernel that can mount a quota
// file system (quota_v2): the node's can; where the host's cannot, those
// tests are skipped, saying so, and the node proves its quotas at every
// boot (checkProjectQuotas, asserted by the cluster e2e).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { closeSync, mkdirSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { runCommand } from "../supervisor/mod.ts";
import { tempDir } from "../testing/mod.ts";
import {
  assignProject,
  checkProjectQuotas,
  kernelHasQuotaFormat,
  clearProjectLimit,
  DATA_QUOTA_MKFS,
  PROJECT_QUOTA_MOUNT_OPTION,
  projectOf,
  projectUsage,
  QUOTA_MIGRATION_ARGS,
  QuotaError,
  quotaFeaturesMissing,
  setProjectLimit,
} from "./quota.ts";

const dir = tempDir("nodecore-quota-");
const image = join(dir.path, "fs.img");
const mountpoint = join(dir.path, "mnt");
let loop = "";
const MiB = 1024 * 1024;

/** Writes `bytes` to `path` in 64 KiB pieces; the errno code of the first write that fails, or "ok". */
function fill(path: string, bytes: number): string {
  const fd = openSync(path, "a");
  try {
    const piece = Buffer.alloc(64 * 1024, 7);
    for (let written = 0; written < bytes; written += piece.length) writeSync(fd, piece, 0, Math.min(piece.length, bytes - written));
    return "ok";
  } catch (err) {
    return (err as NodeJS.ErrnoException).code ?? String(err);
  } finally {
    closeSync(fd);
  }
}

beforeAll(async () => {
  await runCommand(["truncate", "-s", String(64 * MiB), image]);
  // Formatted as nodes formatted their data partition before project quotas.
  await runCommand(["mke2fs", "-t", "ext4", "-q", "-E", "lazy_itable_init=1,lazy_journal_init=1", image]);
});

afterAll(async () => {
  await runCommand(["umount", mountpoint]).catch(() => {});
  if (loop) await runCommand(["losetup", "-d", loop]).catch(() => {});
  dir[Symbol.dispose]();
});

describe("the file system's quota features", () => {
  test("a file system from before them lacks them; the migration's tune2fs gives them; a new one has them", async () => {
    expect(quotaFeaturesMissing(image)).toEqual(["quota", "project", "project quota inode"]);
    await runCommand(["tune2fs", ...QUOTA_MIGRATION_ARGS, image]);
    expect(quotaFeaturesMissing(image)).toEqual([]);
    const fresh = join(dir.path, "fresh.img");
    await runCommand(["truncate", "-s", String(16 * MiB), fresh]);
    await runCommand(["mke2fs", "-t", "ext4", "-q", "-O", DATA_QUOTA_MKFS.features, "-E", DATA_QUOTA_MKFS.extended, fresh]);
    expect(quotaFeaturesMissing(fresh)).toEqual([]);
  });
});

const QUOTAS = kernelHasQuotaFormat();
if (!QUOTAS) console.warn("localstorage: this kernel cannot mount a quota file system (no quota_v2); the limit tests are skipped (the node checks its own at boot, the cluster e2e asserts it)");

describe.skipIf(!QUOTAS)("a directory's hard limit", () => {
  beforeAll(async () => {
    loop = (await runCommand(["losetup", "--find", "--show", image])).stdout.trim();
    mkdirSync(mountpoint, { recursive: true });
    await runCommand(["mount", "-t", "ext4", "-o", PROJECT_QUOTA_MOUNT_OPTION, loop, mountpoint]);
  });

  test("writes past the limit fail with EDQUOT; another project and the rest of the file system are untouched", () => {
    const volume = join(mountpoint, "volume-1");
    const other = join(mountpoint, "volume-2");
    mkdirSync(volume);
    mkdirSync(other);
    assignProject(volume, 1001);
    assignProject(other, 1002);
    expect(projectOf(volume)).toEqual({ id: 1001, inherit: true });
    setProjectLimit(mountpoint, 1001, 4 * MiB);
    setProjectLimit(mountpoint, 1002, 4 * MiB);

    // Files and directories made below inherit the project.
    mkdirSync(join(volume, "sub"));
    expect(projectOf(join(volume, "sub")).id).toBe(1001);
    expect(fill(join(volume, "sub", "a"), 3 * MiB)).toBe("ok");
    expect(fill(join(volume, "b"), 2 * MiB)).toBe("EDQUOT");
    const usage = projectUsage(mountpoint, 1001);
    expect(usage.limitBytes).toBe(4 * MiB);
    expect(usage.usedBytes).toBeGreaterThan(3 * MiB);
    expect(usage.usedBytes).toBeLessThanOrEqual(4 * MiB);
    expect(usage.usedInodes).toBeGreaterThanOrEqual(3);

    // The other project has its own room, and so has the file system outside both.
    expect(fill(join(other, "c"), 3 * MiB)).toBe("ok");
    expect(fill(join(mountpoint, "outside"), 8 * MiB)).toBe("ok");
  });

  test("raised while in use, the limit takes the write; cleared, the project has none", () => {
    const volume = join(mountpoint, "volume-1");
    setProjectLimit(mountpoint, 1001, 8 * MiB);
    expect(projectUsage(mountpoint, 1001).limitBytes).toBe(8 * MiB);
    expect(fill(join(volume, "b"), 3 * MiB)).toBe("ok");
    clearProjectLimit(mountpoint, 1001);
    expect(projectUsage(mountpoint, 1001).limitBytes).toBe(0);
  });

  test("the boot's check: a limit set, read back and removed, nothing left", () => {
    expect(checkProjectQuotas(mountpoint)).toBeUndefined();
  });

  test("bad IDs and limits are refused before any call", () => {
    expect(() => assignProject(mountpoint, 0)).toThrow(QuotaError);
    expect(() => setProjectLimit(mountpoint, 2 ** 32, MiB)).toThrow("is not 1 to");
    expect(() => setProjectLimit(mountpoint, 5, -1)).toThrow("a limit of -1 bytes");
  });
});
