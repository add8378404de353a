// Hard limits on directories of the data partition: ext4 project quotas.
// A persistent volume (internal/kubernetes' provisioner) is a directory
// with a project of its own and a block limit at the claim's size; writes
// past it fail with EDQUOT, and nothing else on the partition notices.
//
//   file system     features quota + project, the project quota inode
//                   (mke2fs: DATA_QUOTA_MKFS; partitions formatted before
//                   them get both once, at boot, before mounting:
//                   tune2fs, see quotaFeaturesMissing), mounted with
//                   `prjquota` so that limits are enforced, not only counted
//   a volume        assignProject(dir, id): the directory's project ID and
//                   the inherit flag (FS_IOC_FSSETXATTR), so that all it
//                   will hold is counted against the project
//   its limit       setProjectLimit(path, id, bytes): quotactl_fd
//                   Q_SETQUOTA; raised or lowered while in use
//   its usage       projectUsage(path, id): quotactl_fd Q_GETQUOTA
//
// The kernel does the accounting, so usage is exact and free to read (the
// kubelet's volume metrics), and a limit holds against every writer.
// Struct layouts are 64-bit Linux's (linux/fs.h fsxattr, linux/quota.h
// if_dqblk).

import { closeSync, existsSync, mkdirSync, openSync, readFileSync, readSync, rmSync } from "node:fs";
import { join } from "node:path";
import { release } from "node:os";
import { ioctl, quotactlFd } from "../sys/mod.ts";

/** mke2fs arguments for a data file system with project quotas. */
export const DATA_QUOTA_MKFS = { features: "quota,project", extended: "quotatype=prjquota" } as const;
/** The mount option that enforces project limits (without it, usage is only counted). */
export const PROJECT_QUOTA_MOUNT_OPTION = "prjquota";
/** tune2fs arguments that give an unmounted ext4 file system what DATA_QUOTA_MKFS gives a new one. */
export const QUOTA_MIGRATION_ARGS = ["-O", "quota,project", "-Q", "prjquota"] as const;

const SUPERBLOCK = 1024;
const RO_COMPAT_OFFSET = 0x64;
const PRJ_QUOTA_INUM_OFFSET = 0x26c;
const RO_COMPAT_QUOTA = 0x100;
const RO_COMPAT_PROJECT = 0x2000;

/**
 * What an ext4 file system on `device` (unmounted, or a file) lacks for
 * project quotas, from its superblock: the features and the project quota
 * inode; empty when it has them all.
 */
export function quotaFeaturesMissing(device: string): string[] {
  const fd = openSync(device, "r");
  try {
    const superblock = Buffer.alloc(1024);
    readSync(fd, superblock, 0, superblock.length, SUPERBLOCK);
    const roCompat = superblock.readUInt32LE(RO_COMPAT_OFFSET);
    return [
      ...(roCompat & RO_COMPAT_QUOTA ? [] : ["quota"]),
      ...(roCompat & RO_COMPAT_PROJECT ? [] : ["project"]),
      ...(superblock.readUInt32LE(PRJ_QUOTA_INUM_OFFSET) !== 0 ? [] : ["project quota inode"]),
    ];
  } finally {
    closeSync(fd);
  }
}

/**
 * Whether this kernel can mount an ext4 file system with the quota
 * feature: the quota format module (quota_v2) loaded, or built in. Without
 * it such a file system does not mount at all, so the data partition gets
 * the features only where it holds (the node image loads quota_v2; a host
 * running the tests may lack it).
 */
export function kernelHasQuotaFormat(): boolean {
  try {
    if (/^quota_v2 /m.test(readFileSync("/proc/modules", "utf8"))) return true;
  } catch {
    // No /proc/modules: a kernel without module support; look at what is built in.
  }
  const builtin = `/lib/modules/${release()}/modules.builtin`;
  return existsSync(builtin) && /(^|\/)quota_v2\.ko$/m.test(readFileSync(builtin, "utf8"));
}

/** struct fsxattr: 28 bytes; fsx_xflags at 0, fsx_projid at 12. */
const FSXATTR_BYTES = 28;
const FS_IOC_FSGETXATTR = 0x801c581f;
const FS_IOC_FSSETXATTR = 0x401c5820;
/** New files and directories below take the directory's project. */
export const FS_XFLAG_PROJINHERIT = 0x200;

/** struct if_dqblk: 72 bytes (eight u64, a u32, padding). */
const DQBLK_BYTES = 72;
/** Limits are counted in blocks of this many bytes (QIF_DQBLKSIZE). */
const QUOTA_BLOCK_BYTES = 1024;
const PRJQUOTA = 2;
const Q_GETQUOTA = 0x800007;
const Q_SETQUOTA = 0x800008;
const QIF_BLIMITS = 1;
const QIF_ILIMITS = 4;
/** QCMD(cmd, type): the sub-command in the high bits, the quota type in the low byte. */
const qcmd = (cmd: number, type: number) => cmd * 256 + (type & 0xff);

/** The largest project ID (ext4 keeps it in 32 bits; 0 is "no project"). */
export const MAX_PROJECT_ID = 0xffff_fffe;

export class QuotaError extends Error {
  override name = "QuotaError";
}

function withFd<T>(path: string, body: (fd: number) => T): T {
  const fd = openSync(path, "r");
  try {
    return body(fd);
  } finally {
    closeSync(fd);
  }
}

function checkId(id: number): void {
  if (!Number.isInteger(id) || id < 1 || id > MAX_PROJECT_ID) throw new QuotaError(`project ID ${id} is not 1 to ${MAX_PROJECT_ID}`);
}

/** The project ID and inherit flag of `path`. */
export function projectOf(path: string): { id: number; inherit: boolean } {
  return withFd(path, (fd) => {
    const attr = new Uint8Array(FSXATTR_BYTES);
    ioctl(fd, FS_IOC_FSGETXATTR, attr, `FS_IOC_FSGETXATTR ${path}`);
    const view = new DataView(attr.buffer);
    return { id: view.getUint32(12, true), inherit: (view.getUint32(0, true) & FS_XFLAG_PROJINHERIT) !== 0 };
  });
}

/**
 * Puts directory `dir` into project `id`, with the inherit flag: what is
 * created below it from now on is counted against the project. Give it to
 * an empty directory (what it already holds keeps its old project).
 */
export function assignProject(dir: string, id: number): void {
  checkId(id);
  withFd(dir, (fd) => {
    const attr = new Uint8Array(FSXATTR_BYTES);
    ioctl(fd, FS_IOC_FSGETXATTR, attr, `FS_IOC_FSGETXATTR ${dir}`);
    const view = new DataView(attr.buffer);
    view.setUint32(0, view.getUint32(0, true) | FS_XFLAG_PROJINHERIT, true);
    view.setUint32(12, id, true);
    ioctl(fd, FS_IOC_FSSETXATTR, attr, `FS_IOC_FSSETXATTR ${dir}`);
  });
}

/**
 * Sets project `id`'s hard limit to `bytes` (rounded up to whole KiB; 0:
 * no limit) on the file system holding `path`. Applies at once, to
 * writers already running; usage above a lowered limit stays, and only
 * new writes fail.
 */
export function setProjectLimit(path: string, id: number, bytes: number): void {
  checkId(id);
  if (!Number.isSafeInteger(bytes) || bytes < 0) throw new QuotaError(`a limit of ${bytes} bytes`);
  withFd(path, (fd) => {
    const block = new Uint8Array(DQBLK_BYTES);
    const view = new DataView(block.buffer);
    view.setBigUint64(0, BigInt(Math.ceil(bytes / QUOTA_BLOCK_BYTES)), true); // dqb_bhardlimit
    view.setBigUint64(8, 0n, true); // dqb_bsoftlimit: none
    view.setUint32(64, QIF_BLIMITS, true);
    quotactlFd(fd, qcmd(Q_SETQUOTA, PRJQUOTA), id, block, `Q_SETQUOTA project ${id} on ${path}`);
  });
}

export interface ProjectUsage {
  usedBytes: number;
  /** 0: no limit. */
  limitBytes: number;
  usedInodes: number;
  limitInodes: number;
}

/** Project `id`'s usage and limits on the file system holding `path`. */
export function projectUsage(path: string, id: number): ProjectUsage {
  checkId(id);
  return withFd(path, (fd) => {
    const block = new Uint8Array(DQBLK_BYTES);
    quotactlFd(fd, qcmd(Q_GETQUOTA, PRJQUOTA), id, block, `Q_GETQUOTA project ${id} on ${path}`);
    const view = new DataView(block.buffer);
    return {
      limitBytes: Number(view.getBigUint64(0, true)) * QUOTA_BLOCK_BYTES,
      usedBytes: Number(view.getBigUint64(16, true)),
      limitInodes: Number(view.getBigUint64(24, true)),
      usedInodes: Number(view.getBigUint64(40, true)),
    };
  });
}

/** Removes project `id`'s limits (its usage is the kernel's and goes with its files). */
export function clearProjectLimit(path: string, id: number): void {
  checkId(id);
  withFd(path, (fd) => {
    const block = new Uint8Array(DQBLK_BYTES);
    new DataView(block.buffer).setUint32(64, QIF_BLIMITS | QIF_ILIMITS, true);
    quotactlFd(fd, qcmd(Q_SETQUOTA, PRJQUOTA), id, block, `Q_SETQUOTA project ${id} on ${path}`);
  });
}

/** The project the boot's check uses; volumes take IDs above it. */
export const QUOTA_CHECK_PROJECT = 1;
const CHECK_DIR = ".project-quota-check";

/**
 * Proves on the mounted data file system at `mountpoint` that project
 * limits work: a directory given a project and a 1 MiB limit reads the
 * limit back; both go again. Returns why not, or undefined if they work.
 */
export function checkProjectQuotas(mountpoint: string): string | undefined {
  const dir = join(mountpoint, CHECK_DIR);
  try {
    rmSync(dir, { recursive: true, force: true });
    mkdirSync(dir);
    assignProject(dir, QUOTA_CHECK_PROJECT);
    setProjectLimit(mountpoint, QUOTA_CHECK_PROJECT, 1024 * 1024);
    const { limitBytes } = projectUsage(mountpoint, QUOTA_CHECK_PROJECT);
    if (limitBytes !== 1024 * 1024) return `a limit of 1 MiB read back as ${limitBytes} bytes`;
    clearProjectLimit(mountpoint, QUOTA_CHECK_PROJECT);
    return undefined;
  } catch (err) {
    return (err as Error).message;
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
