// Where the image's parts live: on the build host (outputs, cache) and inside
// the guest (the paths PID 1 relies on). Pure constants and path helpers, no
// I/O, so the node's init can import them without pulling in the builder.

import { join } from "node:path";

const KIB = 1024;
const MIB = 1024 * KIB;
const GIB = 1024 * MIB;

// ---- Build host -------------------------------------------------------------

/** The repository root: image/ sits directly below it. */
export const REPO_ROOT = join(import.meta.dir, "..");

/** Outputs, relative to the repository root. */
export const OUT_DIR = "out/image";
/** Downloads and intermediate products (gitignored), relative to the repository root. */
export const CACHE_DIR = ".cache/image";
/** The bun-compiled node init the image boots, relative to the repository root. */
export const DEFAULT_INIT_BINARY = "out/init";
/** The upstream binaries and container images, as bun run build lays them out (image/upstream). */
export const DEFAULT_SYSTEM_TREE = "out/system";

export type KernelFormat = "vmlinux" | "bzImage";
/**
 * The uncompressed ELF vmlinux, booted through its PVH entry point, skips the
 * kernel's self-decompression (about 3 s per boot under TCG).
 */
export const DEFAULT_KERNEL_FORMAT: KernelFormat = "vmlinux";

/** The newc cpio, lz4-compressed (legacy frames): see compressInitramfs. In the slot directory. */
export const INITRAMFS_FILE = "initramfs";
/** What earlier builds wrote beside the kernel: removed, so that nothing boots a stale archive. */
export const OLD_OUTPUT_FILES = ["initramfs.cpio", "initramfs.cpio.lz4", "system.squashfs", "stage0.cpio"] as const;
export const DISK_FILE = "disk.img";
/**
 * One slot's contents, as the disk template installs them into slot a and
 * as an update streams them: the bundle (internal/update).
 */
export const SLOT_DIR = "slot";
export const SLOT_KERNEL_FILE = "kernel";
/** The system image followed by its dm-verity hash tree (image/verity.ts). */
export const SYSTEM_FILE = "system";
export const SLOT_CMDLINE_FILE = "cmdline";
export const SLOT_VERSION_FILE = "version";
/** The bundle's description: each file's size and sha256 (internal/update/bundle.ts). */
export const BUNDLE_MANIFEST = "bundle.json";
export const MANIFEST_FILE = "manifest.json";
/** Beside every cached output: the fingerprint of the inputs it was built from. */
export const FINGERPRINT_SUFFIX = ".inputs";

/** The start of every slot's kernel command line (the build adds the slot's parameters). */
export const DEFAULT_KERNEL_CMDLINE = "console=ttyS0 panic=-1";

export interface ImagePaths {
  outDir: string;
  /** The kernel the launcher boots (-kernel): slot a's, uncompressed (vmlinux boots faster under qemu). */
  kernel: string;
  /** The slot's files (the update bundle). */
  slot: { dir: string; kernel: string; initramfs: string; system: string; cmdline: string; version: string; bundle: string };
  /** The node's initramfs: the slot's. */
  initramfs: string;
  disk: string;
  manifest: string;
}

/** Output paths for a kernel format, below outDir (default: <repo>/out/image). */
export function imagePaths(format: KernelFormat, outDir: string = join(REPO_ROOT, OUT_DIR)): ImagePaths {
  const slotDir = join(outDir, SLOT_DIR);
  const slot = {
    dir: slotDir,
    kernel: join(slotDir, SLOT_KERNEL_FILE),
    initramfs: join(slotDir, INITRAMFS_FILE),
    system: join(slotDir, SYSTEM_FILE),
    cmdline: join(slotDir, SLOT_CMDLINE_FILE),
    version: join(slotDir, SLOT_VERSION_FILE),
    bundle: join(slotDir, BUNDLE_MANIFEST),
  };
  return {
    outDir,
    kernel: join(outDir, format),
    slot,
    initramfs: slot.initramfs,
    disk: join(outDir, DISK_FILE),
    manifest: join(outDir, MANIFEST_FILE),
  };
}

// ---- Disk -------------------------------------------------------------------
//
// The node finds its partitions by GPT partition name: the kernel reports it
// as PARTNAME= in /sys/class/block/<dev>/uevent (type GUIDs are not exposed in
// sysfs). Type GUIDs are the standard ones, so host tools show them sensibly.

//   0     1 MiB          257 MiB             513 MiB             769 MiB         2 GiB
//   ├ GPT ┼ 1 "ESP" (FAT32) ┼ 3 "SYSTEM-A" ──────┼ 4 "SYSTEM-B" ──────┼ 2 "DATA" ──────┼
//           the boot record,  system image + its    the other slot's     LUKS2, made at
//           each slot's kernel, dm-verity hash tree                       first boot
//           initramfs, cmdline
//
// DATA keeps number 2, as before there were slots.

export const DISK_SIZE_BYTES = 2 * GIB;
export const SECTOR_BYTES = 512;
/** Partitions start on 1 MiB boundaries. */
export const PARTITION_ALIGN_BYTES = 1 * MIB;
export const ESP_START_BYTES = 1 * MIB;
/** Two slots' kernels and initramfs (about 95 MiB each) and the node's files. */
export const ESP_SIZE_BYTES = 256 * MIB;
/** One slot's system image (squashfs, about 100 MiB) and its hash tree. */
export const SYSTEM_SLOT_SIZE_BYTES = 256 * MIB;
export const SYSTEM_A_START_BYTES = ESP_START_BYTES + ESP_SIZE_BYTES;
export const SYSTEM_B_START_BYTES = SYSTEM_A_START_BYTES + SYSTEM_SLOT_SIZE_BYTES;

export const ESP_PARTITION_NAME = "ESP";
export const DATA_PARTITION_NAME = "DATA";
export const ESP_PARTITION_NUMBER = 1;
export const DATA_PARTITION_NUMBER = 2;
export const SYSTEM_A_PARTITION_NUMBER = 3;
export const SYSTEM_B_PARTITION_NUMBER = 4;
/** The FAT volume label of the ESP. */
export const ESP_FS_LABEL = "ESP";

/** "EFI system partition". */
export const ESP_TYPE_GUID = "C12A7328-F81F-11D2-BA4B-00A0C93EC93B";
/** "Linux filesystem data"; the node formats it (LUKS2 + ext4) at first boot. */
export const DATA_TYPE_GUID = "0FC63DAF-8483-4772-8E79-3D69D8477DE4";

/**
 * Fixed GUIDs keep the template byte-for-byte reproducible. Every node's disk
 * is a copy of it, so these are not unique across nodes: find partitions by
 * name, never by these.
 */
export const DISK_GUID = "6E6F6465-636F-7265-0000-000000000000";
export const ESP_PARTITION_GUID = "6E6F6465-636F-7265-0000-000000000001";
export const DATA_PARTITION_GUID = "6E6F6465-636F-7265-0000-000000000002";
export const SYSTEM_A_PARTITION_GUID = "6E6F6465-636F-7265-0000-000000000003";
export const SYSTEM_B_PARTITION_GUID = "6E6F6465-636F-7265-0000-000000000004";
/** The FAT volume serial number (32-bit hex). */
export const ESP_VOLUME_ID = "6e6f6465";

// ---- Guest ------------------------------------------------------------------

/** The static pre-init the kernel runs: makes / a mount of its own, mounts /proc and /dev, then execs GUEST_INIT. */
export const GUEST_PREINIT = "/init";
/** The bun-compiled node init (a copy of out/init). */
export const GUEST_INIT = "/init.bin";

export const GUEST_ETCD = "/usr/bin/etcd";
export const GUEST_MKE2FS = "/usr/sbin/mke2fs";
export const GUEST_E2FSCK = "/usr/sbin/e2fsck";
/** Debian's tune2fs: gives a data partition formatted before project quotas its quota features, once (internal/localstorage/quota.ts). */
export const GUEST_TUNE2FS = "/usr/sbin/tune2fs";
export const GUEST_CRYPTSETUP = "/usr/sbin/cryptsetup";
/** Debian's fsck.fat (dosfstools): checks the ESP before every mount (internal/localstorage checkESP). */
export const GUEST_FSCK_FAT = "/usr/sbin/fsck.fat";
/** Debian's veritysetup: opens the booted slot's system image (internal/localstorage/system_image.ts). */
export const GUEST_VERITYSETUP = "/usr/sbin/veritysetup";
/** Debian's chronyd: the node's time sync (internal/clock/chrony.ts). */
export const GUEST_CHRONYD = "/usr/sbin/chronyd";
/** Debian's nft: kube-proxy's nftables mode runs it (internal/kubernetes/proxy.ts). */
export const GUEST_NFT = "/usr/sbin/nft";

/** Kernel modules live in /lib/modules/<uname -r>/, as depmod lays them out. */
export function guestModulesDir(kernelRelease: string): string {
  return `/lib/modules/${kernelRelease}`;
}

/**
 * In the modules dir: every shipped module, one path (relative to the modules
 * dir) per line, in an order in which loading each with finit_module(2)
 * succeeds: dependencies and soft "pre:" dependencies come first. The node
 * has no modprobe; it loads this list top to bottom, treating EEXIST as done.
 */
export const GUEST_MODULE_LOAD_LIST = "modules.load";
