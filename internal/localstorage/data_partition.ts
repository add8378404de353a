// The data partition: LUKS2 (dm-crypt) around ext4, unlocked with a key the
// cluster code supplies. Formatted exactly once: a partition that already
// holds LUKS is only ever opened, and a wrong key is an error, never a reason
// to format.

import { existsSync, mkdirSync, openSync, readFileSync, readSync, closeSync } from "node:fs";
import { writeFileDurably } from "./durable_file.ts";
import type { Logger } from "../log/mod.ts";
import { CommandError, runCommand } from "../supervisor/mod.ts";
import { mount, umount } from "../sys/mod.ts";
import { checkProjectQuotas, DATA_QUOTA_MKFS, kernelHasQuotaFormat, PROJECT_QUOTA_MOUNT_OPTION, QUOTA_MIGRATION_ARGS, quotaFeaturesMissing } from "./quota.ts";

/** cryptsetup exits with this code when no key slot opens with the given key. */
const CRYPTSETUP_EXIT_WRONG_KEY = 2;
/** The key is random and high-entropy, so a slow KDF buys nothing; pbkdf2 at minimum cost keeps unlock fast under emulation. */
const LUKS_FORMAT_ARGS = ["--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--batch-mode"];
const EXT4_MAGIC_OFFSET = 1024 + 56;
const EXT4_MAGIC = 0xef53;

export class StorageError extends Error {
  override name = "StorageError";
}

export interface DataPartitionOptions {
  /** The block device of the data partition. */
  device: string;
  /** Where to mount the unlocked file system. */
  mountpoint: string;
  /** The device-mapper name for the unlocked device. */
  mapperName: string;
  /** The key that unlocks the partition (32 bytes). */
  key: Uint8Array;
  /** Path of the marker file written after formatting. */
  formattedMarker: string;
  /**
   * Whether the file system gets project quotas (quota.ts: persistent
   * volumes' hard limits): a new one is formatted with them, one from
   * before them gets them once, before mounting, and it is mounted to
   * enforce them. Default: where the kernel can mount such a file system.
   */
  projectQuotas?: boolean;
  logger: Logger;
  signal?: AbortSignal;
}

/** What mountDataPartition did. */
export type DataMountResult = "formatted" | "mounted";

/** One line of /proc/self/mounts: where, and its options ("rw", "ro", "prjquota", ...). */
export interface MountEntry {
  source: string;
  target: string;
  fstype: string;
  options: string[];
}

/** The kernel escapes space, tab, newline and backslash in mount paths as octal (\040). */
const unescapeMountPath = (path: string) => path.replace(/\\([0-7]{3})/g, (_, octal: string) => String.fromCharCode(parseInt(octal, 8)));

/** This process's mounts (/proc/self/mounts), in order. */
export function mountTable(): MountEntry[] {
  return readFileSync("/proc/self/mounts", "utf8")
    .split("\n")
    .filter(Boolean)
    .map((line) => {
      const [source = "", target = "", fstype = "", options = ""] = line.split(" ");
      return { source: unescapeMountPath(source), target: unescapeMountPath(target), fstype, options: options.split(",") };
    });
}

/** The mount exactly at `mountpoint` (the last one, if stacked), or undefined if there is none. */
export function mountAt(mountpoint: string): MountEntry | undefined {
  return mountTable().findLast((m) => m.target === mountpoint);
}

/** Whether something is mounted exactly at `mountpoint` (per /proc/self/mounts). */
export function isMounted(mountpoint: string): boolean {
  return mountAt(mountpoint) !== undefined;
}

async function isLuks(device: string, signal?: AbortSignal): Promise<boolean> {
  try {
    await runCommand(["cryptsetup", "isLuks", device], { signal });
    return true;
  } catch (err) {
    if (err instanceof CommandError && err.exitCode === 1) return false;
    throw err;
  }
}

function hasExt4(device: string): boolean {
  const fd = openSync(device, "r");
  try {
    const buf = Buffer.alloc(2);
    readSync(fd, buf, 0, 2, EXT4_MAGIC_OFFSET);
    return buf.readUInt16LE(0) === EXT4_MAGIC;
  } finally {
    closeSync(fd);
  }
}

async function unlock(options: DataPartitionOptions, mapped: string): Promise<void> {
  if (existsSync(mapped)) {
    options.logger.info("data partition already unlocked", { device: mapped });
    return;
  }
  try {
    await runCommand(["cryptsetup", "open", "--type", "luks2", "--key-file", "-", options.device, options.mapperName], {
      stdin: options.key,
      signal: options.signal,
    });
  } catch (err) {
    if (err instanceof CommandError && err.exitCode === CRYPTSETUP_EXIT_WRONG_KEY) {
      throw new StorageError(`data partition ${options.device} does not open with this node's key (wrong key); leaving it untouched`, {
        cause: err,
      });
    }
    throw new StorageError(`could not unlock data partition ${options.device}: ${(err as Error).message}`, { cause: err });
  }
}

/**
 * Unlocks and mounts the data partition, formatting it first if it was never
 * formatted. Returns "formatted" on first use, "mounted" afterwards.
 */
export async function mountDataPartition(options: DataPartitionOptions): Promise<DataMountResult> {
  const { device, logger, signal } = options;
  if (options.key.length !== 32) throw new StorageError(`data partition key must be 32 bytes, got ${options.key.length}`);
  if (!existsSync(device)) throw new StorageError(`data partition ${device} does not exist`);
  const mapped = `/dev/mapper/${options.mapperName}`;
  const projectQuotas = options.projectQuotas ?? kernelHasQuotaFormat();
  if (isMounted(options.mountpoint)) {
    // A restarted runnable finds the partition as it left it.
    logger.info("data partition already mounted", { mountpoint: options.mountpoint });
    return "mounted";
  }
  let result: DataMountResult = "mounted";
  if (!(await isLuks(device, signal))) {
    logger.info("data partition is empty, encrypting it (first boot)", { device });
    await runCommand(["cryptsetup", "luksFormat", ...LUKS_FORMAT_ARGS, "--key-file", "-", device], { stdin: options.key, signal });
    result = "formatted";
  }
  await unlock(options, mapped);
  if (!hasExt4(mapped)) {
    // Either the first boot, or one that died between encrypting and
    // formatting: there is no file system, so nothing can be lost.
    logger.info("creating ext4 file system on the unlocked data partition", { device: mapped, projectQuotas });
    const quota = projectQuotas ? ["-O", DATA_QUOTA_MKFS.features] : [];
    const extended = ["lazy_itable_init=1", "lazy_journal_init=1", ...(projectQuotas ? [DATA_QUOTA_MKFS.extended] : [])].join(",");
    await runCommand(["mke2fs", "-t", "ext4", "-q", "-L", "data", ...quota, "-E", extended, mapped], { signal, logger });
    result = "formatted";
  } else if (projectQuotas) {
    const missing = quotaFeaturesMissing(mapped);
    if (missing.length) {
      // Formatted before project quotas: tune2fs adds them to the
      // unmounted file system in place (it keeps every file), once.
      logger.info("giving the data file system project quotas, once, before mounting it", { device: mapped, missing: missing.join(", ") });
      await runCommand(["tune2fs", ...QUOTA_MIGRATION_ARGS, mapped], { signal, logger });
    }
  }
  mkdirSync(options.mountpoint, { recursive: true });
  try {
    mount(mapped, options.mountpoint, "ext4", 0n, projectQuotas ? PROJECT_QUOTA_MOUNT_OPTION : "");
  } catch (err) {
    throw new StorageError(`could not mount data partition on ${options.mountpoint}: ${(err as Error).message}`, { cause: err });
  }
  if (projectQuotas) {
    const problem = checkProjectQuotas(options.mountpoint);
    if (problem) logger.warn("project quotas do not work on the data partition: persistent volumes get no hard limit", { problem });
    else logger.info("project quotas enforced on the data partition: persistent volumes get hard limits");
  } else {
    logger.warn("this kernel cannot mount a quota file system (no quota_v2): the data partition has no project quotas, and persistent volumes get no hard limit");
  }
  if (result === "formatted") writeFileDurably(options.formattedMarker, `${new Date().toISOString()}\n`);
  const formattedAt = existsSync(options.formattedMarker) ? readFileSync(options.formattedMarker, "utf8").trim() : undefined;
  if (!formattedAt) logger.warn("data partition has no format marker; it was formatted by something else");
  logger.info(result === "formatted" ? "data partition formatted and mounted" : "data partition mounted", {
    mountpoint: options.mountpoint,
    formattedAt,
  });
  return result;
}

/** Unmounts and locks the data partition (clean shutdown, tests). */
export async function closeDataPartition(mountpoint: string, mapperName: string, signal?: AbortSignal): Promise<void> {
  try {
    umount(mountpoint);
  } catch (err) {
    throw new StorageError(`could not unmount ${mountpoint}: ${(err as Error).message}`, { cause: err });
  }
  await runCommand(["cryptsetup", "close", mapperName], { signal });
}
