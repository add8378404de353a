// Package image: the node image a launcher boots under qemu — a kernel, an
// initramfs that holds the whole node OS (no root filesystem), and a disk
// template with an empty data partition.
//
// What the guest runs: the kernel starts /init, a static pre-init
// (preinit.c) that mounts /proc and devtmpfs on /dev and execs /init.bin,
// the bun-compiled node init (out/init). From there the node has: etcd
// (built from its Go module, image/upstream), Debian's mke2fs/e2fsck and
// cryptsetup (with their shared libraries at the paths ldd reports), the kernel modules for virtio disk/net, fw_cfg, vfat,
// ext4 and dm-crypt (plain .ko, loaded in the order of modules.load), and a
// few /etc files. initramfs.ts lists the layout; layout.ts has the paths.
// Beside it, the system image (system.ts): a read-only squashfs with what
// only some roles need (the container runtime, the CNI plugins, Kubernetes,
// the container images: out/system, which `bun run build` lays out),
// mounted by a node when a role first needs it, attached by the launcher as
// a read-only drive.
//
// Build steps (`bun image/build.ts`), each skipped when its inputs did not
// change (cache.ts: a fingerprint beside each output):
//
//   apt: ensure host packages (dpkg -s, else apt-get install)
//     │
//   apt-cache show linux-image-amd64 ──Depends──▶ linux-image-<abi>-amd64=<version>
//     │ apt-get download, dpkg -x, depmod            (.cache/image/kernel/…)
//     ├──────────────▶ vmlinuz ──payload, xz -d──▶ out/image/vmlinux
//     │                         (or copied as out/image/bzImage)
//     └─▶ modules.dep ──closure of MODULE_ROOTS, decompress, depmod -b──▶ staged modules
//                                                                          │
//   image/preinit.c ──gcc -static──▶ preinit ─────────┐                    │
//   out/init, out/system's etcd, mke2fs, e2fsck,      │                    │
//   cryptsetup ──ldd──────────────────────────────────┼─▶ newc cpio ◀──────┘
//                                                     ▼
//                                              │ lz4 -l -9
//                                              out/image/initramfs.cpio.lz4
//   out/system (less etcd, etcdctl) ──────────────────┐ mksquashfs (zstd)
//                                                     ▼
//                                              out/image/system.squashfs
//   sgdisk (GPT) + mkfs.vfat -C (ESP) ─────────▶ out/image/disk.img
//                                                     │
//   all of the above ──────────────────────────▶ out/image/manifest.json
//
// Invariants:
//  - The host's /boot and installed kernel are never touched; the kernel
//    comes from the package apt would install, unpacked into the cache.
//  - Outputs are reproducible: same inputs, same bytes (sorted cpio with
//    fixed metadata, fixed GUIDs and FAT volume id, no timestamps).
//  - An output with a fingerprint beside it is complete: outputs are written
//    to <name>.partial and renamed, the fingerprint is written last.
//  - The guest finds its partitions by GPT name (ESP_PARTITION_NAME,
//    DATA_PARTITION_NAME, reported as PARTNAME= in sysfs uevent files),
//    and its modules in /lib/modules/<uname -r>/modules.load.
//  - The disk template is never booted: launchers boot a copy (cloneDisk).

import { copyFileSync, existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { isAbsolute, join, relative, resolve } from "node:path";
import { createLogger, type Logger } from "../internal/log/mod.ts";
import { cachedStep, hashFile } from "./cache.ts";
import { writeCpio } from "./cpio.ts";
import { BUILD_PACKAGES, ensurePackages } from "./deps.ts";
import { buildDisk, readPartitions, type PartitionInfo } from "./disk.ts";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import { compilePreinit, compressInitramfs, describeEntries, HOST_BINARIES, initramfsContents, TREE_BINARIES } from "./initramfs.ts";
import { buildSystemImage, describeSystem, systemContents } from "./system.ts";
import { extractVmlinux, fetchKernel, resolveKernelPackage } from "./kernel.ts";
import {
  CACHE_DIR,
  DEFAULT_INIT_BINARY,
  DEFAULT_KERNEL_CMDLINE,
  DEFAULT_KERNEL_FORMAT,
  DEFAULT_SYSTEM_TREE,
  FINGERPRINT_SUFFIX,
  GUEST_INIT,
  GUEST_PREINIT,
  imagePaths,
  MANIFEST_FILE,
  OLD_INITRAMFS_FILE,
  OUT_DIR,
  REPO_ROOT,
  type KernelFormat,
} from "./layout.ts";
import { MODULE_ROOTS, stageModules } from "./modules.ts";

export * from "./layout.ts";
export { BOOT_PACKAGES, BUILD_PACKAGES, ensurePackages } from "./deps.ts";
export { ImageBuildError } from "./errors.ts";
export { CommandError } from "../internal/supervisor/mod.ts";
export { run, type RunOptions, type RunResult } from "./exec.ts";
export { MODULE_ROOTS } from "./modules.ts";
export type { PartitionInfo } from "./disk.ts";
export { bootAndWatch, qemuArgs, CONTROLLER_MEMORY_MIB, DEFAULT_CPUS, DEFAULT_MEMORY_MIB, QEMU_BINARY, WORKER_MEMORY_MIB, type BootResult, type ConsoleLine, type QemuOptions } from "./qemu.ts";

const MIB = 1024 * 1024;

/** What out/image/manifest.json says. File names are relative to it. */
export interface ImageManifest {
  kernel: {
    file: string;
    format: KernelFormat;
    package: string;
    packageVersion: string;
    /** `uname -r` in the guest. */
    release: string;
    bytes: number;
    sha256: string;
  };
  initramfs: {
    file: string;
    bytes: number;
    sha256: string;
    /** The node init it carries (as /init.bin). */
    init: { source: string; sha256: string };
    /** Module paths below /lib/modules/<release>/, in load order. */
    modules: string[];
    /** Guest paths of the shipped host binaries and libraries. */
    binaries: string[];
    libraries: string[];
  };
  disk: {
    file: string;
    /** Apparent size; the file is sparse. */
    bytes: number;
    partitions: PartitionInfo[];
  };
  system: {
    file: string;
    bytes: number;
    sha256: string;
    /** Paths inside the image. */
    files: string[];
  };
  cmdline: string;
}

export interface BuildImageOptions {
  /** The bun-compiled node init (default: <repo>/out/init). */
  init?: string | undefined;
  /** Default: <repo>/out/image. */
  outDir?: string | undefined;
  /** Default: <repo>/.cache/image. */
  cacheDir?: string;
  /** Default: vmlinux (PVH boot, no decompression in the guest). */
  kernelFormat?: KernelFormat | undefined;
  /** Install missing Debian packages (default: true). */
  installPackages?: boolean;
  /** The upstream system tree (default: <repo>/out/system, laid out by bun run build). */
  systemTree?: string;
  /** The user's Kubernetes server binaries, put into the system image instead of the built ones (image/system.ts). */
  kubernetesDir?: string;
  logger?: Logger;
}

/** The builder's own sources: part of every step's inputs that it implements. */
function source(file: string): string {
  return join(import.meta.dir, file);
}

/** A path relative to the repository if it lies inside it, else absolute. */
function repoRelative(path: string): string {
  const inside = relative(REPO_ROOT, path);
  return inside.startsWith("..") || isAbsolute(inside) ? resolve(path) : inside;
}

function mib(bytes: number): string {
  return `${(bytes / MIB).toFixed(1)} MiB`;
}

/** Builds (or brings up to date) the kernel, initramfs, disk template and manifest. */
export async function buildImage(options: BuildImageOptions = {}): Promise<ImageManifest> {
  const log = options.logger ?? createLogger("image");
  const format = options.kernelFormat ?? DEFAULT_KERNEL_FORMAT;
  const init = options.init ?? join(REPO_ROOT, DEFAULT_INIT_BINARY);
  const systemTree = options.systemTree ?? join(REPO_ROOT, DEFAULT_SYSTEM_TREE);
  const cacheDir = options.cacheDir ?? join(REPO_ROOT, CACHE_DIR);
  const paths = imagePaths(format, options.outDir ?? join(REPO_ROOT, OUT_DIR));
  if (!existsSync(init)) throw new ImageBuildError(`no node init at ${init}: build it first (bun build.ts) or pass --init`);
  mkdirSync(paths.outDir, { recursive: true });
  mkdirSync(cacheDir, { recursive: true });

  if (options.installPackages ?? true) {
    log.info("checking host packages", { count: BUILD_PACKAGES.length });
    const installed = await ensurePackages(BUILD_PACKAGES);
    if (installed.length > 0) log.info("installed host packages", { packages: installed.join(",") });
  }

  log.info("resolving kernel package");
  const pkg = await resolveKernelPackage();
  log.info("fetching kernel", { package: pkg.name, version: pkg.version });
  const { tree: kernel, fetched } = await fetchKernel(cacheDir, pkg);
  log.info(fetched ? "kernel unpacked" : "kernel cached", { release: kernel.release });

  const kernelBuilt = await cachedStep(paths.kernel, {
    inputs: { params: { step: "kernel", format, pkg }, files: [kernel.vmlinuz, source("kernel.ts")] },
    build: async () => {
      log.info(format === "vmlinux" ? "extracting vmlinux from bzImage" : "copying bzImage", { format });
      if (format === "vmlinux") await extractVmlinux(kernel.vmlinuz, paths.kernel);
      else copyFileSync(kernel.vmlinuz, paths.kernel);
    },
  });
  // The other format's file would only mislead a launcher looking in outDir.
  const stale = imagePaths(format === "vmlinux" ? "bzImage" : "vmlinux", paths.outDir).kernel;
  rmSync(stale, { force: true });
  rmSync(stale + FINGERPRINT_SUFFIX, { force: true });
  log.info(kernelBuilt ? "kernel written" : "kernel up to date", { file: paths.kernel, size: mib(statSync(paths.kernel).size) });

  log.info("staging kernel modules", { roots: MODULE_ROOTS.length });
  const modules = await stageModules(kernel, { stageDir: join(cacheDir, "modules") });
  for (const unmet of modules.unmetSoftdeps) log.warn("soft module dependency not shipped", { softdep: unmet });
  log.info("modules staged", { count: modules.loadOrder.length });

  const preinit = join(cacheDir, "preinit");
  const gccVersion = (await run(["gcc", "-dumpfullversion"])).stdout.trim();
  const preinitBuilt = await cachedStep(preinit, {
    inputs: { params: { step: "preinit", gccVersion }, files: [source("preinit.c"), source("initramfs.ts")] },
    build: async () => {
      log.info("compiling pre-init", { gcc: gccVersion });
      await compilePreinit(source("preinit.c"), preinit);
    },
  });
  if (!preinitBuilt) log.info("pre-init up to date");

  log.info("collecting initramfs contents", { init });
  const contents = await initramfsContents({ init, preinit, modules, systemTree });
  const initramfsBuilt = await cachedStep(paths.initramfs, {
    inputs: { params: { step: "initramfs", entries: describeEntries(contents.entries) }, files: [...contents.sources, source("cpio.ts"), source("initramfs.ts")] },
    build: async () => {
      log.info("writing initramfs", { entries: contents.entries.length });
      const cpio = `${paths.initramfs}.cpio`;
      const bytes = writeCpio(cpio, contents.entries);
      log.info("compressing initramfs (lz4)", { uncompressed: mib(bytes) });
      await compressInitramfs(cpio, paths.initramfs);
      rmSync(cpio, { force: true });
    },
  });
  rmSync(join(paths.outDir, OLD_INITRAMFS_FILE), { force: true });
  rmSync(join(paths.outDir, OLD_INITRAMFS_FILE + FINGERPRINT_SUFFIX), { force: true });
  log.info(initramfsBuilt ? "initramfs written" : "initramfs up to date", { file: paths.initramfs, size: mib(statSync(paths.initramfs).size) });

  const system = systemContents(systemTree, options.kubernetesDir);
  const systemBuilt = await cachedStep(paths.system, {
    inputs: { params: { step: "system", files: describeSystem(system) }, files: [...system.sources, source("system.ts"), source("oci.ts")] },
    build: async () => {
      log.info("writing the system image (squashfs, zstd)", { files: system.files.length });
      await buildSystemImage(system, join(cacheDir, "system"), paths.system);
    },
  });
  log.info(systemBuilt ? "system image written" : "system image up to date", { file: paths.system, size: mib(statSync(paths.system).size) });

  const diskBuilt = await cachedStep(paths.disk, {
    inputs: { params: { step: "disk" }, files: [source("disk.ts"), source("layout.ts")] },
    build: async () => {
      log.info("building disk template");
      await buildDisk(paths.disk, join(cacheDir, "esp.img"));
    },
  });
  log.info(diskBuilt ? "disk template written" : "disk template up to date", { file: paths.disk, size: mib(statSync(paths.disk).size) });

  // The manifest hashes the outputs; the outputs' own fingerprints say
  // whether that is needed again.
  const stamps = [paths.kernel, paths.initramfs, paths.disk, paths.system].map((output) => output + FINGERPRINT_SUFFIX);
  const manifestInputs = { params: { step: "manifest", format, pkg, release: kernel.release, init: repoRelative(init) }, files: [...stamps, source("mod.ts")] };
  const manifestBuilt = await cachedStep(paths.manifest, {
    inputs: manifestInputs,
    build: async () => {
      log.info("writing manifest");
      const manifest: ImageManifest = {
        kernel: {
          file: relative(paths.outDir, paths.kernel),
          format,
          package: pkg.name,
          packageVersion: pkg.version,
          release: kernel.release,
          bytes: statSync(paths.kernel).size,
          sha256: await hashFile(paths.kernel),
        },
        initramfs: {
          file: relative(paths.outDir, paths.initramfs),
          bytes: statSync(paths.initramfs).size,
          sha256: await hashFile(paths.initramfs),
          init: { source: repoRelative(init), sha256: await hashFile(init) },
          modules: modules.loadOrder,
          binaries: [GUEST_PREINIT, GUEST_INIT, ...HOST_BINARIES, ...TREE_BINARIES],
          libraries: contents.libraries,
        },
        disk: {
          file: relative(paths.outDir, paths.disk),
          bytes: statSync(paths.disk).size,
          partitions: await readPartitions(paths.disk),
        },
        system: {
          file: relative(paths.outDir, paths.system),
          bytes: statSync(paths.system).size,
          sha256: await hashFile(paths.system),
          files: system.files.map((file) => file.path),
        },
        cmdline: DEFAULT_KERNEL_CMDLINE,
      };
      writeFileSync(paths.manifest, JSON.stringify(manifest, null, 2) + "\n");
    },
  });
  if (!manifestBuilt) log.info("manifest up to date");
  return readManifest(paths.outDir);
}

/** Reads out/image/manifest.json (or the one in outDir). */
export function readManifest(outDir: string = join(REPO_ROOT, OUT_DIR)): ImageManifest {
  const path = join(outDir, MANIFEST_FILE);
  if (!existsSync(path)) throw new ImageBuildError(`no image manifest at ${path}: run bun image/build.ts`);
  return JSON.parse(readFileSync(path, "utf8")) as ImageManifest;
}

/** Absolute paths of a manifest's files. */
export function manifestPaths(manifest: ImageManifest, outDir: string = join(REPO_ROOT, OUT_DIR)): { kernel: string; initramfs: string; disk: string; system: string } {
  return {
    kernel: join(outDir, manifest.kernel.file),
    initramfs: join(outDir, manifest.initramfs.file),
    disk: join(outDir, manifest.disk.file),
    system: join(outDir, manifest.system.file),
  };
}

/** Copies the disk template for one node, keeping it sparse. */
export async function cloneDisk(template: string, dest: string): Promise<void> {
  await run(["cp", "--sparse=always", template, dest]);
}
