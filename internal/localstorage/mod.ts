// Package localstorage: the node's storage, as a declared tree (after
// Monogon's localstorage).
//
//   GPT disk (virtio)
//   ├─ "ESP"  FAT  ──mount──▶ /esp        parameters.pb, sealed.pb (not secret alone),
//   │                                     the boot record, each slot's kernel + initramfs
//   ├─ "SYSTEM-A" / "SYSTEM-B"  squashfs + hash tree ─dm-verity(root hash from
//   │      the booted slot's command line)─▶ /dev/mapper/system ─▶ /system (roles)
//   └─ "DATA" LUKS2 ─unlock(key)─▶ /dev/mapper/data ─ext4─▶ /data
//                                                     node key + certificate, etcd, kubernetes,
//                                                     persistent volumes (project quotas,
//                                                     quota.ts: mounted prjquota, proven at boot)
//   tmpfs ───────────────────────────────────────────▶ /ephemeral  sockets, runtime files
//
//   storageLayout(root) names every path; code never builds one by hand.
//   sealed.pb has its one home here (sealed_configuration.ts): read, written
//   once at enrolment, and updated under the ESP's lock, by the cluster
//   flows and the cold-start workers alike.
//   The key for DATA comes from the cluster code (internal/cluster): it
//   combines the node's and the cluster's halves, so neither the disk nor
//   the cluster alone can open it.
//
// Invariants:
//  - Nothing is formatted twice: a partition with a LUKS header is only
//    opened; a wrong key is an error that leaves the partition untouched.
//  - A boot that died between encrypting and creating the file system
//    resumes by creating it (there was no data to lose).
//  - Every external tool (cryptsetup, mke2fs) runs through the process
//    runner, so PID 1's reaper leaves it alone and failures carry stderr.

import { mkdirSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { MS_DIRSYNC, MS_NODEV, MS_NOEXEC, MS_NOSUID, mount } from "../sys/mod.ts";
import { DATA_PARTITION_NAME, ESP_PARTITION_NAME, storageLayout, type StorageLayout } from "./layout.ts";
import { findPartition } from "./partitions.ts";
import { StorageError } from "./data_partition.ts";
import { runCommand } from "../supervisor/mod.ts";
import { SCRUB_FILLER } from "./scrub.ts";
export { writeFileDurably, writeFileDurablyAsync, appendFileTo, replaceDurably, syncDirectory } from "./durable_file.ts";
export { scrubFreeSpace, SCRUB_FILLER } from "./scrub.ts";
export { exclusively } from "./exclusive.ts";
export { readSealedConfiguration, writeSealedConfiguration, updateSealedConfiguration, SealedConfigurationError } from "./sealed_configuration.ts";
export { freeSpace, describeSpace, waitForFreeSpace, FREE_SPACE_POLL_MS, type FreeSpace, type SpaceWaitOptions } from "./free_space.ts";

export {
  storageLayout,
  ESP_PARTITION_NAME,
  DATA_PARTITION_NAME,
  DATA_MAPPER_NAME,
  SLOTS,
  SYSTEM_PARTITION_NAMES,
  SYSTEM_MAPPER_NAME,
  ESP_BOOT_RECORD,
  espSlotFiles,
  type Slot,
  type StorageLayout,
} from "./layout.ts";
export { blockDevices, findPartition, type BlockDevice } from "./partitions.ts";
export {
  assignProject,
  checkProjectQuotas,
  clearProjectLimit,
  kernelHasQuotaFormat,
  MAX_PROJECT_ID,
  projectOf,
  projectUsage,
  QUOTA_CHECK_PROJECT,
  QuotaError,
  setProjectLimit,
  type ProjectUsage,
} from "./quota.ts";
export { mountDataPartition, closeDataPartition, isMounted, mountAt, mountTable, StorageError, type MountEntry, type DataPartitionOptions, type DataMountResult } from "./data_partition.ts";

export {
  openSystemImage,
  mountSystemImage,
  readBootSelection,
  commandLineParameters,
  formatSystemImageParameter,
  parseSystemImageParameter,
  SystemImageError,
  SYSTEM_IMAGE_DEVICE,
  SLOT_PARAMETER,
  TRIAL_PARAMETER,
  SYSTEM_PARAMETER,
  BUILD_PARAMETER,
  TRIAL_BOUND_PARAMETER,
  MIN_TRIAL_BOUND_S,
  MAX_TRIAL_BOUND_S,
  VERITY_BLOCK_BYTES,
  type BootSelection,
  type SystemImageParameters,
} from "./system_image.ts";

/** What the ESP's check found: nothing, damage it repaired, or damage it could not repair (or no FAT at all). */
export type ESPCheck = { state: "clean" } | { state: "repaired"; said: string } | { state: "unrepaired"; said: string };

/**
 * Checks the ESP before it is mounted, and repairs it (fsck.fat -a): FAT
 * has no journal, and a power cut while a file is written there (an
 * update's boot files) leaves clusters allocated that no file owns. They
 * stay lost until a check frees them: the node_boot e2e's power cut in the
 * middle of an update left 90 MiB of a 252 MiB ESP lost, and the next
 * update could not fit. In its automatic mode fsck.fat keeps lost chains
 * as FSCKnnnn.REC files, which mountESP removes.
 *
 * fsck.fat exits 1 both when it repaired something and when it could not
 * check at all (a partition that is not FAT: "Logical sector size is
 * zero."); only its "Filesystem was changed" tells a repair apart.
 */
export async function checkESP(device = findPartition(ESP_PARTITION_NAME)?.path): Promise<ESPCheck> {
  if (!device) throw new StorageError(`no partition named ${ESP_PARTITION_NAME} found: is the node's disk attached?`);
  // Through the process runner: PID 1 reaps every child it does not track.
  const result = await runCommand(["fsck.fat", "-a", device], { okExitCodes: [0, 1] }).catch((err: unknown) => {
    throw new StorageError(`fsck.fat could not check the ESP ${device}: ${(err as Error).message.split("\n")[0]}`, { cause: err });
  });
  if (result.exitCode === 0) return { state: "clean" };
  const output = `${result.stdout}\n${result.stderr}`;
  // Its notes on converting long names (no iconv data in the initramfs) say nothing about the ESP.
  const lines = output.split("\n").filter((line) => line.trim() !== "" && !/^Cannot initialize conversion/.test(line) && !/^fsck\.fat \d/.test(line));
  const said = lines.slice(-6).join("; ") || `fsck.fat exited ${result.exitCode} and said nothing`;
  return /\*\*\* Filesystem was changed \*\*\*/.test(output) ? { state: "repaired", said } : { state: "unrepaired", said };
}

/**
 * Mounts the ESP (FAT) at its place in the layout, with dirsync. On FAT a
 * file renamed over another takes over the other's directory entry, but
 * without dirsync the entry is rewritten only when the renamed file's inode
 * is written back, while the replaced file's clusters are freed at once: a
 * power cut in between left the entry naming freed clusters ("invalid
 * cluster chain", EIO on every read) or, after a scrub, zeros (qemu fault
 * run, seed 11). With dirsync the rename writes the entry before it returns.
 */
export function mountESP(layout: StorageLayout, device = findPartition(ESP_PARTITION_NAME)?.path): string {
  if (!device) throw new StorageError(`no partition named ${ESP_PARTITION_NAME} found: is the node's disk attached?`);
  mkdirSync(layout.esp.path, { recursive: true });
  try {
    mount(device, layout.esp.path, "vfat", MS_NOSUID | MS_NODEV | MS_NOEXEC | MS_DIRSYNC, "umask=0077");
  } catch (err) {
    throw new StorageError(`could not mount the ESP ${device} on ${layout.esp.path}: ${(err as Error).message}`, { cause: err });
  }
  // A scrub cut short by a power cut or a shutdown leaves its filler, which
  // holds the ESP's free space until something removes it: every later
  // write there (an update's boot files) would fail with ENOSPC.
  rmSync(join(layout.esp.path, SCRUB_FILLER), { force: true });
  // fsck.fat -a keeps lost clusters as FSCKnnnn.REC files (checkESP): the
  // pieces of a file a power cut interrupted, which nothing reads.
  for (const name of readdirSync(layout.esp.path)) if (/^FSCK\d{4}\.REC$/i.test(name)) rmSync(join(layout.esp.path, name), { force: true });
  return device;
}

/** The data partition's device, or an error saying it is missing. */
export function dataPartitionDevice(): string {
  const device = findPartition(DATA_PARTITION_NAME)?.path;
  if (!device) throw new StorageError(`no partition named ${DATA_PARTITION_NAME} found: is the node's disk attached?`);
  return device;
}

/** Mounts the ephemeral tmpfs. */
export function mountEphemeral(layout: StorageLayout): void {
  mkdirSync(layout.ephemeral.path, { recursive: true });
  mount("tmpfs", layout.ephemeral.path, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0700");
}
