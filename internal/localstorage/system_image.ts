// The system image: a read-only squashfs the image build makes beside the
// initramfs (image/system.ts) for what only some roles need, the container
// runtime and Kubernetes first. Each system slot has its own, on the
// partition SYSTEM-A or SYSTEM-B, followed by its dm-verity hash tree
// (image/verity.ts). The booted slot's command line, written by the build
// and completed by PID 1's slot choice (internal/update/select.ts), names
// the slot and carries the root hash:
//
//   nodecore.slot=a  nodecore.system=<data blocks>,<hash offset>,<root hash>
//   nodecore.build=<digest of the slot's files>
//   [nodecore.trial=1: booted once, as an update's trial]
//   [nodecore.trial_bound_s=N: how long such a trial has to rejoin]
//
// At boot the node opens the slot's partition through dm-verity and reads
// it through once (openSystemImage): a partition changed by even one byte
// fails there, before anything runs from it, and the node does not boot it
// (internal/update decides where to go instead). Read through dm-verity,
// every block is checked again whenever it is read, so what was checked is
// what runs. Roles mount the opened device when they first need it.
//
// The partition is never trusted to say what it should hold: the hash and
// the sizes come only from the command line.

import { existsSync, mkdirSync } from "node:fs";
import { open } from "node:fs/promises";
import { MS_NODEV, MS_NOSUID, MS_RDONLY, mount } from "../sys/mod.ts";
import { runCommand } from "../supervisor/mod.ts";
import { isMounted, StorageError } from "./data_partition.ts";
import { SLOTS, SYSTEM_MAPPER_NAME, SYSTEM_PARTITION_NAMES, type Slot } from "./layout.ts";
import { findPartition } from "./partitions.ts";

/** dm-verity's data and hash block size, both. */
export const VERITY_BLOCK_BYTES = 4096;

/** What a node needs to open a slot's system image through dm-verity. */
export interface SystemImageParameters {
  /** The squashfs's size in VERITY_BLOCK_BYTES blocks. */
  dataBlocks: number;
  /** Where the hash tree (its superblock first) begins, in bytes from the partition's start. */
  hashOffset: number;
  /** sha256, 64 lowercase hex digits. */
  rootHash: string;
}

/** The kernel command line parameters the build and the slot choice write. */
export const SLOT_PARAMETER = "nodecore.slot";
export const TRIAL_PARAMETER = "nodecore.trial";
export const SYSTEM_PARAMETER = "nodecore.system";
/** Which build a slot holds: a digest of its kernel, initramfs, root hash and version (image/mod.ts), so that PID 1 can tell whether the firmware booted the chosen slot's build (internal/update/select.ts). */
export const BUILD_PARAMETER = "nodecore.build";
/** How long a trial of this slot has to rejoin, in seconds (internal/update/trial.ts); the build may set it. */
export const TRIAL_BOUND_PARAMETER = "nodecore.trial_bound_s";
export const MIN_TRIAL_BOUND_S = 30;
export const MAX_TRIAL_BOUND_S = 3600;

/** The largest system image a slot's partition can hold (image/layout.ts: 256 MiB); more is a corrupt command line. */
const MAX_DATA_BLOCKS = (1024 * 1024 * 1024) / VERITY_BLOCK_BYTES;

export function formatSystemImageParameter(p: SystemImageParameters): string {
  const text = `${SYSTEM_PARAMETER}=${p.dataBlocks},${p.hashOffset},${p.rootHash}`;
  parseSystemImageParameter(text.slice(SYSTEM_PARAMETER.length + 1));
  return text;
}

/** Parses the value of nodecore.system=; throws a StorageError naming what is wrong. */
export function parseSystemImageParameter(value: string): SystemImageParameters {
  const match = /^([0-9]{1,9}),([0-9]{1,13}),([0-9a-f]{64})$/.exec(value);
  if (!match) throw new StorageError(`${SYSTEM_PARAMETER} is not "<data blocks>,<hash offset>,<sha256 root hash>": ${JSON.stringify(value.slice(0, 100))}`);
  const dataBlocks = Number(match[1]);
  const hashOffset = Number(match[2]);
  if (dataBlocks < 1 || dataBlocks > MAX_DATA_BLOCKS) throw new StorageError(`${SYSTEM_PARAMETER}: ${dataBlocks} data blocks is out of range`);
  if (hashOffset < dataBlocks * VERITY_BLOCK_BYTES || hashOffset % VERITY_BLOCK_BYTES !== 0) {
    throw new StorageError(`${SYSTEM_PARAMETER}: the hash tree at byte ${hashOffset} would overlap ${dataBlocks} data blocks or is not block-aligned`);
  }
  return { dataBlocks, hashOffset, rootHash: match[3]! };
}

/** How this boot was started: which slot, whether as a trial, and its system image. */
export interface BootSelection {
  slot: Slot;
  trial: boolean;
  /** Absent when the command line carries none (a corrupt slot entry): the node cannot open a system image. */
  system: SystemImageParameters | undefined;
  /** Why system is absent. */
  systemError: string | undefined;
  /** The slot's own bound for a trial to rejoin, if its command line sets one (MIN_TRIAL_BOUND_S..MAX_TRIAL_BOUND_S). */
  trialBoundS?: number | undefined;
}

/** A kernel command line's key=value words, by key (the last of a key wins, as the kernel's own parsing does). */
export function commandLineParameters(cmdline: string): Map<string, string> {
  const values = new Map<string, string>();
  for (const word of cmdline.trim().split(/\s+/)) {
    const eq = word.indexOf("=");
    if (eq > 0) values.set(word.slice(0, eq), word.slice(eq + 1));
  }
  return values;
}

/** Reads the slot parameters from a kernel command line; undefined when no slot was chosen yet (no nodecore.slot). */
export function readBootSelection(cmdline: string): BootSelection | undefined {
  const values = commandLineParameters(cmdline);
  const slot = values.get(SLOT_PARAMETER);
  if (slot === undefined || !(SLOTS as readonly string[]).includes(slot)) return undefined;
  const raw = values.get(SYSTEM_PARAMETER);
  let system: SystemImageParameters | undefined;
  let systemError: string | undefined;
  if (raw === undefined) systemError = `the command line has no ${SYSTEM_PARAMETER}=`;
  else {
    try {
      system = parseSystemImageParameter(raw);
    } catch (err) {
      systemError = (err as Error).message;
    }
  }
  const bound = values.get(TRIAL_BOUND_PARAMETER);
  const trialBoundS = bound !== undefined && /^\d{1,5}$/.test(bound) ? Math.min(MAX_TRIAL_BOUND_S, Math.max(MIN_TRIAL_BOUND_S, Number(bound))) : undefined;
  return { slot: slot as Slot, trial: values.get(TRIAL_PARAMETER) === "1", system, systemError, ...(trialBoundS !== undefined ? { trialBoundS } : {}) };
}

/** The device the opened system image is read from. */
export const SYSTEM_IMAGE_DEVICE = `/dev/mapper/${SYSTEM_MAPPER_NAME}`;

/** A system image that does not match its root hash, or cannot be opened at all: the slot must not boot. */
export class SystemImageError extends StorageError {}

const READ_CHUNK_BYTES = 1024 * 1024;

/**
 * Opens the booted slot's system image through dm-verity and reads all of it
 * once; returns the mapped device. Throws a SystemImageError naming the slot
 * and the first bad block if anything does not match.
 */
export async function openSystemImage(selection: BootSelection, options: { signal?: AbortSignal } = {}): Promise<string> {
  const name = SYSTEM_PARTITION_NAMES[selection.slot];
  if (!selection.system) throw new SystemImageError(`slot ${selection.slot} cannot be verified: ${selection.systemError ?? "no system image parameters"}`);
  const partition = findPartition(name);
  if (!partition) throw new SystemImageError(`no partition named ${name}: the disk has no system slot ${selection.slot}`);
  const { dataBlocks, hashOffset, rootHash } = selection.system;
  if (!existsSync(SYSTEM_IMAGE_DEVICE)) {
    try {
      await runCommand(
        ["veritysetup", "open", partition.path, SYSTEM_MAPPER_NAME, partition.path, rootHash, `--hash-offset=${hashOffset}`, `--data-blocks=${dataBlocks}`],
        options.signal ? { signal: options.signal } : {},
      );
    } catch (err) {
      throw new SystemImageError(`slot ${selection.slot}'s system image (${partition.path}) does not open with its root hash: ${(err as Error).message}`, { cause: err });
    }
  }
  const file = await open(SYSTEM_IMAGE_DEVICE, "r");
  const buffer = Buffer.alloc(READ_CHUNK_BYTES);
  let position = 0;
  try {
    for (;;) {
      options.signal?.throwIfAborted();
      let n: number;
      try {
        ({ bytesRead: n } = await file.read(buffer, 0, buffer.length, position));
      } catch (err) {
        throw new SystemImageError(`slot ${selection.slot}'s system image fails verification in the MiB at byte ${position} (${(err as Error).message}): it was changed after it was built`, {
          cause: err,
        });
      }
      if (n === 0) break;
      position += n;
    }
  } finally {
    await file.close();
  }
  if (position !== dataBlocks * VERITY_BLOCK_BYTES) throw new SystemImageError(`slot ${selection.slot}'s system image is ${position} bytes, not ${dataBlocks} blocks`);
  return SYSTEM_IMAGE_DEVICE;
}

/** Mounts the system image opened at boot read-only at `mountpoint`, unless it is mounted already. */
export function mountSystemImage(mountpoint: string, device = SYSTEM_IMAGE_DEVICE): void {
  if (isMounted(mountpoint)) return;
  if (!existsSync(device)) throw new StorageError(`the system image is not open (${device} is missing): the boot did not verify a system slot, see the console's first lines`);
  mkdirSync(mountpoint, { recursive: true });
  try {
    mount(device, mountpoint, "squashfs", MS_RDONLY | MS_NOSUID | MS_NODEV);
  } catch (err) {
    throw new StorageError(`could not mount the system image ${device} on ${mountpoint}: ${(err as Error).message}`, { cause: err });
  }
}
