// An update bundle: one slot's files, as `bun run image` writes them to
// out/image/slot/, with bundle.json describing them.
//
//   kernel      bzImage               ─▶ ESP nodecore/slots/<s>/kernel
//   initramfs   the node OS           ─▶ ESP nodecore/slots/<s>/initramfs
//   cmdline     with the root hash    ─▶ ESP nodecore/slots/<s>/cmdline
//   version                           ─▶ ESP nodecore/slots/<s>/version
//   system      squashfs + hash tree  ─▶ partition SYSTEM-<S>
//   bundle.json { format, version, arch, kubernetes, files: { name: { bytes, sha256 } } },
//               and the initramfs's chunks: the sha256 of each of its MiBs
//
// The initramfs is lz4 in independent 8 MiB blocks of a cpio whose last
// file is the init (image/initramfs.ts): two builds that differ only in the
// init share every block before the init's own changed bytes, so a node
// copies the MiBs its booted slot has alike and is sent only the rest.
//
// The node believes none of it until the bytes it received hash to what
// bundle.json says, and bundle.json is checked (parseBundleManifest) before
// the first byte is written anywhere.

/** The files of a slot, in the order they are streamed (the big one first, the small ones that make the slot bootable last). */
export const BUNDLE_FILES = ["system", "kernel", "initramfs", "version", "cmdline"] as const;
export type BundleFile = (typeof BUNDLE_FILES)[number];
export const BUNDLE_MANIFEST = "bundle.json";
export const BUNDLE_FORMAT = 1;

/** The architecture name bundles carry; what this node runs. */
export const NODE_ARCH = process.arch === "x64" ? "x86_64" : process.arch === "arm64" ? "aarch64" : process.arch;

/** Upper bounds: anything larger cannot fit where it goes (the ESP holds two slots in 256 MiB; a system partition is 256 MiB). */
export const MAX_BUNDLE_FILE_BYTES: Readonly<Record<BundleFile, number>> = {
  system: 256 * 1024 * 1024,
  kernel: 32 * 1024 * 1024,
  initramfs: 120 * 1024 * 1024,
  version: 64,
  cmdline: 2048,
};

/** The files whose chunks a bundle describes, and the chunk size: fixed, so that the list's length follows from the file's. */
export const CHUNKED_FILES: readonly BundleFile[] = ["initramfs"];
export const BUNDLE_CHUNK_BYTES = 1024 * 1024;

export interface BundleFileInfo {
  bytes: number;
  /** sha256, 64 lowercase hex digits. */
  sha256: string;
  /** For CHUNKED_FILES: the sha256 of each BUNDLE_CHUNK_BYTES of the file, in order (the last one may be shorter). */
  chunks?: string[];
}

export interface BundleManifest {
  format: number;
  version: string;
  arch: string;
  /** The Kubernetes version the bundle's software carries ("v1.37.2"), for ctl cluster update's skew check; absent in bundles built before it was written. */
  kubernetes?: string;
  files: Record<BundleFile, BundleFileInfo>;
}

/**
 * A bundle refused: "invalid" when the bundle itself is wrong (its
 * description, its bytes), "precondition" when it is fine but does not fit
 * this node (architecture, version, the slot's state, its size).
 */
export class BundleError extends Error {
  override name = "BundleError";
  constructor(
    message: string,
    readonly kind: "invalid" | "precondition" = "invalid",
  ) {
    super(message);
  }
}

/** A version: printable ASCII without spaces, as build.ts stamps it ("0.1.0+abc1234"). */
export const VERSION_PATTERN = /^[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}$/;

function quote(value: unknown): string {
  const text = typeof value === "string" ? value : (JSON.stringify(value) ?? String(value));
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}

/** Parses and checks bundle.json's text; throws a BundleError naming the first thing wrong. */
export function parseBundleManifest(text: string): BundleManifest {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    // Not the parser's message: it quotes the input, which can be anything.
    throw new BundleError(`${BUNDLE_MANIFEST} is not JSON`);
  }
  if (typeof raw !== "object" || raw === null) throw new BundleError(`${BUNDLE_MANIFEST} is not an object`);
  const m = raw as Record<string, unknown>;
  if (m.format !== BUNDLE_FORMAT) throw new BundleError(`${BUNDLE_MANIFEST} has format ${quote(m.format)}; this node reads format ${BUNDLE_FORMAT}`);
  if (typeof m.version !== "string" || !VERSION_PATTERN.test(m.version)) throw new BundleError(`${BUNDLE_MANIFEST} has no valid version: ${quote(m.version)}`);
  if (typeof m.arch !== "string") throw new BundleError(`${BUNDLE_MANIFEST} has no arch`);
  if (m.kubernetes !== undefined && (typeof m.kubernetes !== "string" || !/^v\d{1,3}\.\d{1,4}\.\d{1,5}(?:[-+][0-9A-Za-z.-]{0,64})?$/.test(m.kubernetes)))
    throw new BundleError(`${BUNDLE_MANIFEST} has no valid Kubernetes version: ${quote(m.kubernetes)}`);
  const files = m.files;
  if (typeof files !== "object" || files === null) throw new BundleError(`${BUNDLE_MANIFEST} lists no files`);
  const out = {} as Record<BundleFile, BundleFileInfo>;
  for (const name of BUNDLE_FILES) {
    const info = (files as Record<string, unknown>)[name] as Record<string, unknown> | undefined;
    if (typeof info !== "object" || info === null) throw new BundleError(`${BUNDLE_MANIFEST} lists no ${name}`);
    const { bytes, sha256 } = info;
    if (typeof bytes !== "number" || !Number.isSafeInteger(bytes) || bytes < 1) throw new BundleError(`${BUNDLE_MANIFEST}: ${name} has no valid size: ${quote(bytes)}`);
    if (bytes > MAX_BUNDLE_FILE_BYTES[name]) throw new BundleError(`${BUNDLE_MANIFEST}: ${name} is ${bytes} bytes, more than the ${MAX_BUNDLE_FILE_BYTES[name]} its place holds`);
    if (typeof sha256 !== "string" || !/^[0-9a-f]{64}$/.test(sha256)) throw new BundleError(`${BUNDLE_MANIFEST}: ${name} has no valid sha256: ${quote(sha256)}`);
    out[name] = { bytes, sha256 };
    const { chunks } = info;
    if (chunks === undefined) continue;
    if (!CHUNKED_FILES.includes(name)) throw new BundleError(`${BUNDLE_MANIFEST}: ${name} lists chunks; only ${CHUNKED_FILES.join(", ")} may`);
    const count = Math.ceil(bytes / BUNDLE_CHUNK_BYTES);
    if (!Array.isArray(chunks) || chunks.length !== count)
      throw new BundleError(`${BUNDLE_MANIFEST}: ${name} must list ${count} chunks of ${BUNDLE_CHUNK_BYTES} bytes, not ${Array.isArray(chunks) ? chunks.length : quote(chunks)}`);
    const bad = chunks.findIndex((chunk) => typeof chunk !== "string" || !/^[0-9a-f]{64}$/.test(chunk));
    if (bad >= 0) throw new BundleError(`${BUNDLE_MANIFEST}: ${name}'s chunk ${bad} has no valid sha256: ${quote(chunks[bad])}`);
    out[name].chunks = chunks as string[];
  }
  const extra = Object.keys(files).filter((name) => !(BUNDLE_FILES as readonly string[]).includes(name));
  if (extra.length > 0) throw new BundleError(`${BUNDLE_MANIFEST} lists files no slot has: ${quote(extra.slice(0, 5).join(", "))}`);
  return { format: BUNDLE_FORMAT, version: m.version, arch: m.arch, ...(typeof m.kubernetes === "string" ? { kubernetes: m.kubernetes } : {}), files: out };
}

/** The numeric release before any "+build" or "-pre" suffix: "0.1.0+abc" → [0, 1, 0]. */
function release(version: string): number[] {
  const core = version.split(/[+-]/, 1)[0] ?? "";
  return core.split(".").map((part) => (/^\d{1,9}$/.test(part) ? Number(part) : 0));
}

/** Negative if a is an older release than b, 0 for the same release (whatever its build), positive if newer. */
export function compareVersions(a: string, b: string): number {
  const x = release(a);
  const y = release(b);
  for (let i = 0; i < Math.max(x.length, y.length); i++) {
    const d = (x[i] ?? 0) - (y[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}
