// Package image: the node image a launcher boots under qemu. A slot is what
// `bun run image` writes to out/image/slot/, what the disk template
// installs as slot a, and what an update streams into the other slot. The
// launcher boots slot a's build straight (the image's vmlinux with the
// slot's initramfs and command line: the firmware's fixed entry); the
// node's PID 1 then reads the disk's boot record and, when it names a slot
// holding another build, kexecs that slot's kernel (internal/update/select.ts,
// docs/updates.md):
//
//   kernel      the Debian kernel's bzImage
//   initramfs   the whole node OS (no root filesystem): a static pre-init
//               (preinit.c) that mounts /proc and devtmpfs and execs
//               /init.bin, the bun-compiled node init (out/init); etcd
//               (built from its Go module, image/upstream); Debian's
//               mke2fs/e2fsck, cryptsetup and veritysetup (with their shared
//               libraries at the paths ldd reports); the kernel modules
//               (plain .ko, loaded in the order of modules.load); a few /etc
//               files. initramfs.ts lists the layout; layout.ts has the paths.
//   system      the system image (system.ts): a read-only squashfs with what
//               only some roles need (the container runtime, the CNI
//               plugins, Kubernetes, the container images: out/system, which
//               `bun run build` lays out), followed by its dm-verity hash
//               tree (verity.ts); it goes onto SYSTEM-A or SYSTEM-B
//   cmdline     the slot's kernel command line, with the hash tree's root
//               hash (nodecore.system=) and the build's digest
//               (nodecore.build=: kernel, initramfs, parameters, version)
//   version     what out/init --version says
//
// Build steps (`bun image/build.ts`), each skipped when its inputs did not
// change (cache.ts: a fingerprint beside each output):
//
//   apt: ensure host packages (dpkg -s, else apt-get install)
//     │
//   apt-cache show linux-image-amd64 ──Depends──▶ linux-image-<abi>-amd64=<version>
//     │ apt-get download, dpkg -x, depmod            (.cache/image/kernel/…)
//     ├──────────────▶ vmlinuz ──payload, xz -d──▶ out/image/vmlinux (the launcher's kernel)
//     │                   └────────copied────────▶ out/image/slot/kernel
//     └─▶ modules.dep ──closure of MODULE_ROOTS, decompress, depmod -b──▶ staged modules
//                                                                          │
//   image/preinit.c ──gcc -static──▶ preinit ─────────┐                    │
//   out/init, out/system's etcd, mke2fs, e2fsck,      │                    │
//   cryptsetup, veritysetup ──ldd─────────────────────┼─▶ newc cpio ◀──────┘
//                                                     ▼
//                                              │ lz4 -l -9
//                                              out/image/slot/initramfs
//   out/system (less etcd, etcdctl) ──────────────────┐ mksquashfs (zstd)
//                                                     ▼
//                                 .cache/image/system.squashfs
//                                                     │ veritysetup format
//                                              out/image/slot/system
//   kernel, initramfs, root hash, version ──sha256──▶ out/image/slot/cmdline
//   sgdisk (GPT) + mkfs.vfat -C + mcopy (ESP) + slot a ─▶ out/image/disk.img
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

import { copyFileSync, existsSync, mkdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { basename, isAbsolute, join, relative, resolve } from "node:path";
import { createHash } from "node:crypto";
import { BUILD_PARAMETER, ESP_BOOT_RECORD, espSlotFiles, formatSystemImageParameter, TRIAL_BOUND_PARAMETER } from "../internal/localstorage/mod.ts";
import { BUNDLE_CHUNK_BYTES, BUNDLE_FILES, BUNDLE_FORMAT, CHUNKED_FILES, NODE_ARCH, parseBundleManifest, type BundleManifest } from "../internal/update/mod.ts";
import { createLogger, type Logger } from "../internal/log/mod.ts";
import { cachedStep, chunkDigests, hashFile } from "./cache.ts";
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
  OLD_OUTPUT_FILES,
  OUT_DIR,
  REPO_ROOT,
  type KernelFormat,
} from "./layout.ts";
import { MODULE_ROOTS, stageModules } from "./modules.ts";
import { buildVerifiedImage } from "./verity.ts";
import { KUBERNETES_VERSION } from "./upstream/versions.ts";

export * from "./layout.ts";
export { BOOT_PACKAGES, BUILD_PACKAGES, ensurePackages } from "./deps.ts";
export { ImageBuildError } from "./errors.ts";
export { CommandError } from "../internal/supervisor/mod.ts";
export { run, type RunOptions, type RunResult } from "./exec.ts";
export { MODULE_ROOTS } from "./modules.ts";
export { HELLO_PORT, helloImage, HOST_BUSYBOX, ociImage, readBusybox } from "./oci.ts";
export type { PartitionInfo } from "./disk.ts";
export { AcceleratorError, ACCELERATORS, chooseAccelerator, PROBE_TIMEOUT_MS, type Accelerator, type AcceleratorChoice } from "./accel.ts";
export { bootAndWatch, qemuArgs, CONTROLLER_MEMORY_MIB, DEFAULT_CPUS, DEFAULT_MEMORY_MIB, QEMU_BINARY, WORKER_MEMORY_MIB, type BootResult, type ConsoleLine, type QemuOptions } from "./qemu.ts";

const MIB = 1024 * 1024;

/** What out/image/manifest.json says. File names are relative to it. */
export interface ImageManifest {
  /** What the node init says it is (out/init --version), stamped into the slot. */
  version: string;
  /** The kernel the launcher boots: slot a's, uncompressed. */
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
  /** The slot the disk template installs as slot a, and the bundle an update streams. */
  slot: {
    dir: string;
    /** bzImage: what the slot choice kexecs. */
    kernel: { file: string; bytes: number; sha256: string };
    /** The slot's kernel command line, with the system image's root hash. */
    cmdline: string;
  };
  /** The slot's initramfs: the whole node OS. */
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
  /** The slot's system image, dm-verity hash tree included. */
  system: {
    file: string;
    bytes: number;
    sha256: string;
    /** Paths inside the image. */
    files: string[];
  };
  /** Slot a's command line: what the launcher boots its kernel with. */
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
  /** How long a trial boot of this slot has to rejoin its cluster, in seconds (default: internal/update's TRIAL_BOUND_MS). */
  trialBoundS?: number | undefined;
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

/** Where the verified system step keeps the nodecore.system= parameter of the hash tree it wrote. */
const VERITY_PARAMETER_FILE = "system.verity";
/** Hex digits of a slot's build digest (nodecore.build=). */
const BUILD_DIGEST_CHARS = 16;

/** The digest that names a slot's build: its files' digests and its parameters, in order. */
export function slotBuild(parts: readonly string[]): string {
  const hash = createHash("sha256");
  for (const part of parts) hash.update(`${part.length}:${part}\n`);
  return hash.digest("hex").slice(0, BUILD_DIGEST_CHARS);
}

/** Writes a file only when its contents change, so that what fingerprints it is not invalidated for nothing. */
function writeFileIfChanged(path: string, text: string): void {
  if (existsSync(path) && readFileSync(path, "utf8") === text) return;
  writeFileSync(path, text);
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

  mkdirSync(paths.slot.dir, { recursive: true });
  const kernelBuilt = await cachedStep(paths.kernel, {
    inputs: { params: { step: "kernel", format, pkg }, files: [kernel.vmlinuz, source("kernel.ts")] },
    build: async () => {
      log.info(format === "vmlinux" ? "extracting vmlinux from bzImage" : "copying bzImage", { format });
      if (format === "vmlinux") await extractVmlinux(kernel.vmlinuz, paths.kernel);
      else copyFileSync(kernel.vmlinuz, paths.kernel);
    },
  });
  // The other format's file, and what builds before the slots wrote, would only mislead a launcher looking in outDir.
  const stale = imagePaths(format === "vmlinux" ? "bzImage" : "vmlinux", paths.outDir).kernel;
  for (const old of [stale, ...OLD_OUTPUT_FILES.map((file) => join(paths.outDir, file))]) {
    rmSync(old, { force: true });
    rmSync(old + FINGERPRINT_SUFFIX, { force: true });
  }
  log.info(kernelBuilt ? "kernel written" : "kernel up to date", { file: paths.kernel, size: mib(statSync(paths.kernel).size) });
  // The slot's kernel is always the bzImage: the slot choice kexecs it, and kexec_file_load takes no other format.
  const slotKernelBuilt = await cachedStep(paths.slot.kernel, {
    inputs: { params: { step: "slot kernel", pkg }, files: [kernel.vmlinuz] },
    build: async () => copyFileSync(kernel.vmlinuz, paths.slot.kernel),
  });
  if (!slotKernelBuilt) log.info("slot kernel up to date");

  log.info("staging kernel modules", { roots: MODULE_ROOTS.length });
  const modules = await stageModules(kernel, { stageDir: join(cacheDir, "modules") });
  for (const unmet of modules.unmetSoftdeps) log.warn("soft module dependency not shipped", { softdep: unmet });
  log.info("modules staged", { count: modules.loadOrder.length });

  const gccVersion = (await run(["gcc", "-dumpfullversion"])).stdout.trim();
  const preinit = join(cacheDir, "preinit");
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
  log.info(initramfsBuilt ? "initramfs written" : "initramfs up to date", { file: paths.initramfs, size: mib(statSync(paths.initramfs).size) });

  const system = systemContents(systemTree, options.kubernetesDir);
  const squashfs = join(cacheDir, "system.squashfs");
  const systemBuilt = await cachedStep(squashfs, {
    inputs: { params: { step: "system", files: describeSystem(system) }, files: [...system.sources, source("system.ts"), source("oci.ts")] },
    build: async () => {
      log.info("writing the system image (squashfs, zstd)", { files: system.files.length });
      await buildSystemImage(system, join(cacheDir, "system"), squashfs);
    },
  });
  if (!systemBuilt) log.info("system image up to date");
  // The hash tree and the parameter that carries its root hash are made together: one cannot be stale against the other.
  const verityParameter = join(paths.outDir, VERITY_PARAMETER_FILE);
  const verifiedBuilt = await cachedStep(paths.slot.system, {
    inputs: { params: { step: "verified system" }, files: [squashfs + FINGERPRINT_SUFFIX, source("verity.ts")] },
    build: async () => {
      log.info("adding the system image's dm-verity hash tree");
      const verity = await buildVerifiedImage(squashfs, paths.slot.system);
      writeFileSync(verityParameter, formatSystemImageParameter(verity) + "\n");
    },
  });
  log.info(verifiedBuilt ? "verified system image written" : "verified system image up to date", { file: paths.slot.system, size: mib(statSync(paths.slot.system).size) });
  const version = (await run([init, "--version"])).stdout.trim();
  if (!/^[\x21-\x7e]{1,64}$/.test(version)) throw new ImageBuildError(`${init} --version printed ${JSON.stringify(version.slice(0, 80))}, not a version`);
  writeFileSync(paths.slot.version, version + "\n");
  // The slot's command line names its build, so that a node can tell whether the firmware booted the build its record chooses (internal/update/select.ts).
  const slotParameters = [readFileSync(verityParameter, "utf8").trim(), ...(options.trialBoundS !== undefined ? [`${TRIAL_BOUND_PARAMETER}=${options.trialBoundS}`] : [])];
  const build = slotBuild([await hashFile(paths.slot.kernel), await hashFile(paths.initramfs), ...slotParameters, version]);
  writeFileIfChanged(paths.slot.cmdline, `${DEFAULT_KERNEL_CMDLINE} ${slotParameters.join(" ")} ${BUILD_PARAMETER}=${build}\n`);

  const bundleBuilt = await cachedStep(paths.slot.bundle, {
    inputs: {
      params: { step: "bundle", version, kubernetes: KUBERNETES_VERSION, chunkBytes: BUNDLE_CHUNK_BYTES },
      files: [paths.slot.kernel + FINGERPRINT_SUFFIX, paths.initramfs + FINGERPRINT_SUFFIX, paths.slot.system + FINGERPRINT_SUFFIX, paths.slot.cmdline],
    },
    build: async () => {
      log.info("describing the update bundle");
      const files = {} as BundleManifest["files"];
      for (const name of BUNDLE_FILES) {
        const path = join(paths.slot.dir, name);
        files[name] = { bytes: statSync(path).size, sha256: await hashFile(path), ...(CHUNKED_FILES.includes(name) ? { chunks: await chunkDigests(path) } : {}) };
      }
      const bundle: BundleManifest = { format: BUNDLE_FORMAT, version, arch: NODE_ARCH, kubernetes: KUBERNETES_VERSION, files };
      parseBundleManifest(JSON.stringify(bundle));
      writeFileSync(paths.slot.bundle, JSON.stringify(bundle, null, 2) + "\n");
    },
  });
  if (!bundleBuilt) log.info("bundle description up to date");

  const slotFiles = [paths.slot.kernel, paths.slot.initramfs, paths.slot.cmdline, paths.slot.version];
  const diskBuilt = await cachedStep(paths.disk, {
    inputs: {
      params: { step: "disk", version },
      files: [source("disk.ts"), source("layout.ts"), paths.slot.kernel + FINGERPRINT_SUFFIX, paths.initramfs + FINGERPRINT_SUFFIX, paths.slot.system + FINGERPRINT_SUFFIX, paths.slot.cmdline],
    },
    build: async () => {
      log.info("building disk template (slot a installed)");
      const espTree = join(cacheDir, "esp-tree");
      rmSync(espTree, { recursive: true, force: true });
      const slotA = join(espTree, espSlotFiles("a").dir);
      mkdirSync(slotA, { recursive: true });
      for (const file of slotFiles) copyFileSync(file, join(slotA, basename(file)));
      writeFileSync(join(espTree, ESP_BOOT_RECORD), "active=a\n");
      await buildDisk(paths.disk, join(cacheDir, "esp.img"), { espTree, systemA: paths.slot.system });
      rmSync(espTree, { recursive: true, force: true });
    },
  });
  log.info(diskBuilt ? "disk template written" : "disk template up to date", { file: paths.disk, size: mib(statSync(paths.disk).size) });

  // The manifest hashes the outputs; the outputs' own fingerprints say
  // whether that is needed again.
  const stamps = [paths.kernel, paths.slot.kernel, paths.initramfs, paths.slot.system, paths.disk].map((output) => output + FINGERPRINT_SUFFIX);
  const manifestInputs = { params: { step: "manifest", format, pkg, release: kernel.release, init: repoRelative(init), version }, files: [...stamps, paths.slot.cmdline, source("mod.ts")] };
  const manifestBuilt = await cachedStep(paths.manifest, {
    inputs: manifestInputs,
    build: async () => {
      log.info("writing manifest");
      const manifest: ImageManifest = {
        version,
        kernel: {
          file: relative(paths.outDir, paths.kernel),
          format,
          package: pkg.name,
          packageVersion: pkg.version,
          release: kernel.release,
          bytes: statSync(paths.kernel).size,
          sha256: await hashFile(paths.kernel),
        },
        slot: {
          dir: relative(paths.outDir, paths.slot.dir),
          kernel: { file: relative(paths.outDir, paths.slot.kernel), bytes: statSync(paths.slot.kernel).size, sha256: await hashFile(paths.slot.kernel) },
          cmdline: readFileSync(paths.slot.cmdline, "utf8").trim(),
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
          file: relative(paths.outDir, paths.slot.system),
          bytes: statSync(paths.slot.system).size,
          sha256: await hashFile(paths.slot.system),
          files: system.files.map((file) => file.path),
        },
        cmdline: readFileSync(paths.slot.cmdline, "utf8").trim(),
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

/**
 * Absolute paths of a manifest's files: a launcher boots kernel with
 * initramfs and the manifest's cmdline (slot a's, as the disk template
 * installs it: the firmware's fixed entry), and a copy of disk.
 */
export function manifestPaths(manifest: ImageManifest, outDir: string = join(REPO_ROOT, OUT_DIR)): { kernel: string; slot: string; initramfs: string; disk: string; system: string } {
  return {
    kernel: join(outDir, manifest.kernel.file),
    slot: join(outDir, manifest.slot.dir),
    initramfs: join(outDir, manifest.initramfs.file),
    disk: join(outDir, manifest.disk.file),
    system: join(outDir, manifest.system.file),
  };
}

/** Copies the disk template for one node, keeping it sparse. */
export async function cloneDisk(template: string, dest: string): Promise<void> {
  await run(["cp", "--sparse=always", template, dest]);
}
