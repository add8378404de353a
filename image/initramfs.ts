// The initramfs: everything the node runs, as one uncompressed newc cpio.
//
//   /init                      static pre-init (preinit.c): mounts /proc, /dev; execs /init.bin
//   /init.bin                  the bun-compiled node init (out/init)
//   /usr/bin/etcd              etcd built from its Go module (image/upstream), static
//   /usr/sbin/{mke2fs,e2fsck,tune2fs,cryptsetup}   for the data partition
//   /usr/sbin/fsck.fat         checks the ESP before it is mounted
//   /usr/sbin/veritysetup      opens the booted slot's system image (dm-verity)
//   /usr/sbin/nft              Debian's nftables, for kube-proxy (worker role)
//   /usr/sbin/chronyd          Debian's chrony: time sync, from the first boot on
//   /lib/x86_64-linux-gnu/*, /lib64/ld-linux-x86-64.so.2
//                              shared libraries of all of the above, at the
//                              paths ldd reports (the loader's default search
//                              path; there is no ld.so.cache)
//   /lib/modules/<release>/    kernel modules, modules.dep, modules.load
//   /etc/{hosts,nsswitch.conf,mke2fs.conf,passwd,group}
//   /dev/console               so the kernel can give /init its stdio
//   /proc /sys /run /tmp /mnt  mount points; /bin, /sbin → usr/bin, usr/sbin
//
// Compressed with lz4 in its legacy frame format (the one the kernel's
// unpacker reads), at level 9: half the size (145.7 → 72.5 MiB), and under
// TCG /init runs no later than with the plain archive (median 5.0 against
// 6.1 s from qemu start, 3 boots each), where zstd -3 and gzip -6, though
// smaller still, cost 1-2 s of decompression per boot. bench/initramfs.ts
// prints the comparison.

import { readdirSync, realpathSync, renameSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import type { CpioEntry } from "./cpio.ts";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import { GUEST_CHRONYD, GUEST_CRYPTSETUP, GUEST_E2FSCK, GUEST_FSCK_FAT, GUEST_INIT, GUEST_MKE2FS, GUEST_NFT, GUEST_TUNE2FS, GUEST_PREINIT, GUEST_VERITYSETUP, guestModulesDir } from "./layout.ts";
import { SHIPPED_INDEX_FILES, type StagedModules } from "./modules.ts";
import { INITRAMFS_FILES } from "./upstream/mod.ts";

/** Host binaries shipped at the same path in the guest (Debian 12 is merged-/usr). */
export const HOST_BINARIES = [GUEST_MKE2FS, GUEST_E2FSCK, GUEST_TUNE2FS, GUEST_CRYPTSETUP, GUEST_VERITYSETUP, GUEST_NFT, GUEST_CHRONYD, GUEST_FSCK_FAT] as const;

/** The built binaries the initramfs carries (etcd: consensus starts before any role mounts the system image). */
export const TREE_BINARIES = INITRAMFS_FILES.map((path) => `/${path}`);

/** Host /etc files shipped as they are. */
export const HOST_ETC_FILES = ["/etc/mke2fs.conf"] as const;

/** etcd (Go) resolves "localhost" through these; there is no other name service. */
const ETC_HOSTS = "127.0.0.1\tlocalhost\n::1\tlocalhost\n";
const ETC_NSSWITCH = "hosts: files dns\n";
/**
 * Users and groups: root, and nobody for what runs unprivileged. The kubelet
 * reads /etc/passwd at start (its user-namespace mappings) and will not
 * start without one.
 */
const ETC_PASSWD = "root:x:0:0:root:/:/bin/false\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n";
const ETC_GROUP = "root:x:0:\nnogroup:x:65534:\n";

const EXECUTABLE_MODE = 0o755;
const DATA_MODE = 0o644;
const DIR_MODE = 0o755;
const STICKY_DIR_MODE = 0o1777;
const CONSOLE_MODE = 0o600;
const CONSOLE_MAJOR = 5;
const CONSOLE_MINOR = 1;

const PREINIT_CFLAGS = ["-static", "-Os", "-s", "-Wall", "-Wextra", "-Werror"] as const;

/** lz4's legacy frames at level 9 (see the header). */
const LZ4_ARGS = ["-l", "-9", "-f", "-q"] as const;

/** Compresses the cpio at source into dest (atomically, via dest.partial) for the kernel's lz4 unpacker. */
export async function compressInitramfs(source: string, dest: string): Promise<void> {
  const partial = `${dest}.partial`;
  await run(["lz4", ...LZ4_ARGS, source, partial]);
  renameSync(partial, dest);
}

/** Compiles preinit.c into a static binary at dest. */
export async function compilePreinit(source: string, dest: string): Promise<void> {
  await run(["gcc", ...PREINIT_CFLAGS, "-o", dest, source]);
}

/**
 * The shared libraries binary needs, at the paths ldd reports (the loader
 * included; the vDSO excluded). A static binary needs none.
 */
export async function sharedLibraries(binary: string): Promise<string[]> {
  const result = await run(["ldd", binary], { okExitCodes: [0, 1] });
  if (/not a dynamic executable|statically linked/.test(result.stdout + result.stderr)) return [];
  if (result.exitCode !== 0) throw new ImageBuildError(`could not list libraries of ${binary}: ${result.stderr.trim()}`);
  const libraries: string[] = [];
  for (const line of result.stdout.split("\n")) {
    const trimmed = line.trim();
    if (trimmed === "" || trimmed.startsWith("linux-vdso")) continue;
    if (trimmed.includes("=> not found")) throw new ImageBuildError(`${binary} needs a missing library: ${trimmed}`);
    const path = /(?:=>\s*)?(\/\S+)\s+\(0x[0-9a-f]+\)$/.exec(trimmed)?.[1];
    if (path === undefined) throw new ImageBuildError(`could not parse ldd output for ${binary}: ${trimmed}`);
    libraries.push(path);
  }
  return libraries;
}

export interface InitramfsInputs {
  /** The bun-compiled node init. */
  init: string;
  /** The compiled pre-init. */
  preinit: string;
  /** The upstream system tree (out/system): etcd comes from there. */
  systemTree: string;
  modules: StagedModules;
}

export interface InitramfsContents {
  entries: CpioEntry[];
  /** Host files the entries copy: what the initramfs's fingerprint hashes. */
  sources: string[];
  /** Shared libraries shipped, by guest path. */
  libraries: string[];
}

function filesBelow(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: "utf8" })
    .map((name) => join(dir, name))
    .filter((path) => statSync(path).isFile());
}

/** Everything the initramfs holds, as cpio entries copying host files. */
export async function initramfsContents(inputs: InitramfsInputs): Promise<InitramfsContents> {
  const entries: CpioEntry[] = [];
  const sources: string[] = [];
  const file = (guestPath: string, hostPath: string, mode: number, last?: true): void => {
    entries.push({ kind: "file", path: guestPath, mode, contents: hostPath, ...(last ? { last } : {}) });
    sources.push(hostPath);
  };

  file(GUEST_PREINIT, inputs.preinit, EXECUTABLE_MODE);
  // Last in the archive: two builds that differ in the init alone share every
  // compressed block before it, and an update sends only the rest.
  file(GUEST_INIT, inputs.init, EXECUTABLE_MODE, true);
  for (const binary of HOST_BINARIES) file(binary, binary, EXECUTABLE_MODE);
  const built = TREE_BINARIES.map((guest) => realpathSync(join(inputs.systemTree, guest)));
  TREE_BINARIES.forEach((guest, i) => file(guest, built[i]!, EXECUTABLE_MODE));

  // The built binaries are static (Go without cgo; runc linked statically),
  // so only the host's need libraries here.
  const libraries = new Set<string>();
  for (const binary of [inputs.init, ...HOST_BINARIES, ...built]) {
    for (const library of await sharedLibraries(binary)) libraries.add(library);
  }
  // Copied as regular files at the reported path (the real file's contents),
  // so no symlink chain from the host's /lib → usr/lib layout is needed.
  for (const library of [...libraries].sort()) file(library, realpathSync(library), EXECUTABLE_MODE);

  const modulesDir = join(inputs.modules.dir, "lib/modules", inputs.modules.release);
  const guestModules = guestModulesDir(inputs.modules.release);
  for (const path of inputs.modules.loadOrder) file(join(guestModules, path), join(modulesDir, path), DATA_MODE);
  for (const index of SHIPPED_INDEX_FILES) file(join(guestModules, index), join(modulesDir, index), DATA_MODE);
  const staged = new Set(inputs.modules.loadOrder.map((path) => join(modulesDir, path)));
  const stray = filesBelow(modulesDir).filter((path) => path.endsWith(".ko") && !staged.has(path));
  if (stray.length > 0) throw new ImageBuildError(`staged modules not in the load order: ${stray.map((p) => relative(modulesDir, p)).join(", ")}`);

  for (const etc of HOST_ETC_FILES) file(etc, etc, DATA_MODE);
  entries.push({ kind: "file", path: "/etc/hosts", mode: DATA_MODE, contents: new TextEncoder().encode(ETC_HOSTS) });
  entries.push({ kind: "file", path: "/etc/nsswitch.conf", mode: DATA_MODE, contents: new TextEncoder().encode(ETC_NSSWITCH) });
  entries.push({ kind: "file", path: "/etc/passwd", mode: DATA_MODE, contents: new TextEncoder().encode(ETC_PASSWD) });
  entries.push({ kind: "file", path: "/etc/group", mode: DATA_MODE, contents: new TextEncoder().encode(ETC_GROUP) });

  entries.push({ kind: "chardev", path: "/dev/console", mode: CONSOLE_MODE, major: CONSOLE_MAJOR, minor: CONSOLE_MINOR });
  for (const dir of ["/proc", "/sys", "/run", "/mnt"]) entries.push({ kind: "dir", path: dir, mode: DIR_MODE });
  entries.push({ kind: "dir", path: "/tmp", mode: STICKY_DIR_MODE });
  entries.push({ kind: "symlink", path: "/bin", target: "usr/bin" });
  entries.push({ kind: "symlink", path: "/sbin", target: "usr/sbin" });

  return { entries, sources, libraries: [...libraries].sort() };
}

/** A stable description of entries (paths, kinds, modes, inline data) for fingerprinting. */
export function describeEntries(entries: readonly CpioEntry[]): unknown[] {
  return entries.map((entry) => {
    if (entry.kind === "file" && typeof entry.contents !== "string") {
      return { ...entry, contents: new Bun.CryptoHasher("sha256").update(entry.contents).digest("hex") };
    }
    return entry;
  });
}
