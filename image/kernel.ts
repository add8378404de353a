// The kernel: Debian's linux-image package, unpacked (never installed) into
// the cache, and the uncompressed vmlinux cut out of its bzImage.
//
//   apt-cache show linux-image-amd64 ──Depends──▶ linux-image-<abi>-amd64 = <version>
//   apt-get download ──▶ .deb ──dpkg -x──▶ <cache>/kernel/<pkg>_<version>/root
//                                            ├─ boot/vmlinuz-<release>
//                                            └─ lib/modules/<release>/ (+ depmod)

import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";

/** The metapackage that tracks Debian's current kernel for this architecture. */
export const KERNEL_METAPACKAGE = "linux-image-amd64";
/** Marks a completely unpacked kernel directory in the cache. */
const COMPLETE_MARKER = ".complete";

export interface KernelPackage {
  name: string;
  version: string;
}

/** An unpacked kernel package in the cache. */
export interface KernelTree {
  package: KernelPackage;
  /** The unpacked package (what dpkg -x produced). */
  root: string;
  /** `uname -r` of this kernel. */
  release: string;
  vmlinuz: string;
  /** <root>/lib/modules/<release>, with depmod's output. */
  modulesDir: string;
}

/**
 * The real package behind the metapackage, and the version apt would fetch.
 * One `apt-cache show` of the metapackage says both (its Depends pins the
 * image package's version) — what `apt-cache depends` reports, plus the
 * version; each apt-cache run costs seconds on hosts without a pkgcache.
 */
export async function resolveKernelPackage(): Promise<KernelPackage> {
  const meta = await run(["apt-cache", "show", "--no-all-versions", KERNEL_METAPACKAGE]);
  const depends = /^Depends:\s*(.*)$/m.exec(meta.stdout)?.[1] ?? "";
  const match = /(?:^|,)\s*(linux-image-[^\s,(]+)(?:\s*\(\s*=\s*([^)\s]+)\s*\))?/.exec(depends);
  const name = match?.[1];
  if (name === undefined) throw new ImageBuildError(`could not resolve kernel package: ${KERNEL_METAPACKAGE} depends on no linux-image-*`);
  const pinned = match?.[2];
  if (pinned !== undefined) return { name, version: pinned };
  const show = await run(["apt-cache", "show", "--no-all-versions", name]);
  const version = /^Version:\s*(\S+)\s*$/m.exec(show.stdout)?.[1];
  if (version === undefined) throw new ImageBuildError(`could not resolve kernel package: apt knows no version of ${name}`);
  return { name, version };
}

function onlyEntry(dir: string, what: string): string {
  const entries = readdirSync(dir);
  if (entries.length !== 1 || entries[0] === undefined) {
    throw new ImageBuildError(`unexpected kernel package layout: ${dir} holds ${entries.length} ${what}, want 1`);
  }
  return entries[0];
}

function treeAt(pkg: KernelPackage, root: string): KernelTree {
  const release = onlyEntry(join(root, "lib/modules"), "module trees");
  const vmlinuz = join(root, "boot", `vmlinuz-${release}`);
  if (!existsSync(vmlinuz)) throw new ImageBuildError(`unexpected kernel package layout: no ${vmlinuz}`);
  return { package: pkg, root, release, vmlinuz, modulesDir: join(root, "lib/modules", release) };
}

/**
 * Downloads and unpacks the kernel package into cacheDir/kernel/, once per
 * package version (dropping older ones). depmod runs on the full module tree
 * so its modules.dep can say which modules the image's modules pull in.
 */
export async function fetchKernel(cacheDir: string, pkg: KernelPackage): Promise<{ tree: KernelTree; fetched: boolean }> {
  const dir = join(cacheDir, "kernel", `${pkg.name}_${pkg.version}`);
  const root = join(dir, "root");
  if (existsSync(join(dir, COMPLETE_MARKER))) return { tree: treeAt(pkg, root), fetched: false };

  const partial = `${dir}.partial`;
  rmSync(partial, { recursive: true, force: true });
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(partial, { recursive: true });
  // Running as root, apt cannot drop to _apt to write here; say so up front
  // instead of getting a warning.
  await run(["apt-get", "download", "-o", "APT::Sandbox::User=root", `${pkg.name}=${pkg.version}`], { cwd: partial });
  const deb = readdirSync(partial).find((f) => f.endsWith(".deb"));
  if (!deb) throw new ImageBuildError(`could not download ${pkg.name}=${pkg.version}: apt-get left no .deb`);
  await run(["dpkg", "-x", join(partial, deb), join(partial, "root")]);
  rmSync(join(partial, deb));
  const tree = treeAt(pkg, join(partial, "root"));
  await run(["depmod", "-b", tree.root, tree.release]);
  renameSync(partial, dir);
  await Bun.write(join(dir, COMPLETE_MARKER), "");
  // Older kernels' trees (hundreds of MiB each) are of no further use.
  for (const entry of readdirSync(join(cacheDir, "kernel"))) {
    if (join(cacheDir, "kernel", entry) !== dir) rmSync(join(cacheDir, "kernel", entry), { recursive: true, force: true });
  }
  return { tree: treeAt(pkg, root), fetched: true };
}

// ---- vmlinux from bzImage ---------------------------------------------------
//
// A bzImage is a real-mode setup (setup_sects + 1 sectors) followed by the
// protected-mode part, which carries the compressed kernel. The x86 boot
// protocol (>= 2.08) records where: payload_offset (from the protected-mode
// start) and payload_length. The payload's last 4 bytes are the uncompressed
// size (the build's size_append), which checks the result. What comes out is
// vmlinux.bin: the stripped ELF vmlinux, whose PVH ELF note lets qemu -kernel
// boot it directly, followed by relocation data only the bzImage decompressor
// uses (KASLR); it is cut off at the ELF's end.

const SETUP_SECTS_OFFSET = 0x1f1;
const DEFAULT_SETUP_SECTS = 4;
const HEADER_MAGIC_OFFSET = 0x202;
const HEADER_MAGIC = "HdrS";
const PROTOCOL_VERSION_OFFSET = 0x206;
const MIN_PROTOCOL_WITH_PAYLOAD = 0x208;
const PAYLOAD_OFFSET_OFFSET = 0x248;
const PAYLOAD_LENGTH_OFFSET = 0x24c;
const BOOT_SECTOR_BYTES = 512;
const SIZE_TRAILER_BYTES = 4;
const ELF_MAGIC = [0x7f, 0x45, 0x4c, 0x46];
const ELF_HEADER_BYTES = 64;
const ELF_CLASS_OFFSET = 4;
const ELF_CLASS_64 = 2;
const ELF_PHOFF_OFFSET = 0x20;
const ELF_SHOFF_OFFSET = 0x28;
const ELF_PHENTSIZE_OFFSET = 0x36;
const ELF_PHNUM_OFFSET = 0x38;
const ELF_SHENTSIZE_OFFSET = 0x3a;
const ELF_SHNUM_OFFSET = 0x3c;
const PHDR_OFFSET_OFFSET = 0x08;
const PHDR_FILESZ_OFFSET = 0x20;

interface Decompressor {
  name: string;
  magic: readonly number[];
  argv: readonly string[];
}

/** Payload compressions the kernel supports that Debian's tools can undo. */
const DECOMPRESSORS: readonly Decompressor[] = [
  { name: "xz", magic: [0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], argv: ["xz", "-dc"] },
  { name: "zstd", magic: [0x28, 0xb5, 0x2f, 0xfd], argv: ["zstd", "-dcq"] },
  { name: "gzip", magic: [0x1f, 0x8b], argv: ["gzip", "-dc"] },
  { name: "lzma", magic: [0x5d, 0x00, 0x00], argv: ["xz", "--format=lzma", "-dc"] },
];

function startsWith(bytes: Uint8Array, magic: readonly number[], at = 0): boolean {
  return magic.every((b, i) => bytes[at + i] === b);
}

/** Where a 64-bit little-endian ELF's last header or segment ends in its file. */
async function elfEnd(path: string): Promise<number> {
  const file = Bun.file(path);
  const header = new DataView(await file.slice(0, ELF_HEADER_BYTES).arrayBuffer());
  if (header.getUint8(ELF_CLASS_OFFSET) !== ELF_CLASS_64) throw new ImageBuildError(`could not extract vmlinux: ${path} is not a 64-bit ELF`);
  const phoff = Number(header.getBigUint64(ELF_PHOFF_OFFSET, true));
  const phentsize = header.getUint16(ELF_PHENTSIZE_OFFSET, true);
  const phnum = header.getUint16(ELF_PHNUM_OFFSET, true);
  const shoff = Number(header.getBigUint64(ELF_SHOFF_OFFSET, true));
  let end = Math.max(phoff + phentsize * phnum, shoff + header.getUint16(ELF_SHENTSIZE_OFFSET, true) * header.getUint16(ELF_SHNUM_OFFSET, true));
  const phdrs = new DataView(await file.slice(phoff, phoff + phentsize * phnum).arrayBuffer());
  for (let i = 0; i < phnum; i++) {
    const offset = Number(phdrs.getBigUint64(i * phentsize + PHDR_OFFSET_OFFSET, true));
    const filesz = Number(phdrs.getBigUint64(i * phentsize + PHDR_FILESZ_OFFSET, true));
    end = Math.max(end, offset + filesz);
  }
  return end;
}

/** Writes the uncompressed vmlinux ELF inside the bzImage at vmlinuz to dest. */
export async function extractVmlinux(vmlinuz: string, dest: string): Promise<void> {
  const image = new Uint8Array(readFileSync(vmlinuz));
  const view = new DataView(image.buffer, image.byteOffset, image.byteLength);
  const magic = new TextDecoder().decode(image.subarray(HEADER_MAGIC_OFFSET, HEADER_MAGIC_OFFSET + 4));
  const protocol = view.getUint16(PROTOCOL_VERSION_OFFSET, true);
  if (magic !== HEADER_MAGIC || protocol < MIN_PROTOCOL_WITH_PAYLOAD) {
    throw new ImageBuildError(`could not extract vmlinux: ${vmlinuz} is not a bzImage with boot protocol >= 2.08`);
  }
  const setupSects = view.getUint8(SETUP_SECTS_OFFSET) || DEFAULT_SETUP_SECTS;
  const start = (setupSects + 1) * BOOT_SECTOR_BYTES + view.getUint32(PAYLOAD_OFFSET_OFFSET, true);
  const length = view.getUint32(PAYLOAD_LENGTH_OFFSET, true);
  if (start + length > image.length || length <= SIZE_TRAILER_BYTES) {
    throw new ImageBuildError(`could not extract vmlinux: payload of ${vmlinuz} lies outside the file`);
  }
  const payload = image.subarray(start, start + length - SIZE_TRAILER_BYTES);
  const expectedSize = view.getUint32(start + length - SIZE_TRAILER_BYTES, true);
  const decompressor = DECOMPRESSORS.find((d) => startsWith(payload, d.magic));
  if (!decompressor) throw new ImageBuildError(`could not extract vmlinux: unknown payload compression in ${vmlinuz}`);

  const partial = `${dest}.partial`;
  await run(decompressor.argv, { stdin: payload, stdoutFile: partial });
  const head = new Uint8Array(await Bun.file(partial).slice(0, ELF_MAGIC.length).arrayBuffer());
  const size = Bun.file(partial).size;
  if (!startsWith(head, ELF_MAGIC) || size !== expectedSize) {
    rmSync(partial, { force: true });
    throw new ImageBuildError(`could not extract vmlinux: ${decompressor.name} payload gave ${size} bytes ` + `${startsWith(head, ELF_MAGIC) ? "" : "(not ELF) "}, want an ELF of ${expectedSize}`);
  }
  truncateSync(partial, await elfEnd(partial));
  renameSync(partial, dest);
}
