// A writer for the "newc" cpio format (SVR4 without checksums), the one the
// kernel unpacks an initramfs from.
//
// Each entry is a 110-byte ASCII header ("070701" and 13 eight-digit hex
// fields), the NUL-terminated name, padding to 4 bytes, the data, padding to
// 4 bytes; a "TRAILER!!!" entry ends the archive.
//
// Invariants: the output depends only on the entries (sorted by path, except
// that files marked `last` come after all others, inode numbers assigned in
// that order, owner root, mtime 0), so the same inputs give the same bytes.
// `last` is for the file that changes most between two builds (the init):
// everything before it then stays at the same offsets, and so do the
// compressed blocks over it (initramfs.ts, internal/update/bundle.ts). Parents precede children: missing parent directories
// are added (mode 0755). Device nodes are archived as such, so building needs
// no root and no mknod.

import { closeSync, openSync, readFileSync, renameSync, writeSync } from "node:fs";
import { ImageBuildError } from "./errors.ts";

export type CpioEntry =
  | { kind: "dir"; path: string; mode: number }
  /** contents: a host file to copy, or the bytes themselves. */
  /** last: after every entry without it (see the header). */
  | { kind: "file"; path: string; mode: number; contents: string | Uint8Array; last?: true }
  | { kind: "symlink"; path: string; target: string }
  | { kind: "chardev"; path: string; mode: number; major: number; minor: number };

const MAGIC = "070701";
const HEADER_BYTES = 110;
const ALIGN = 4;
const TRAILER = "TRAILER!!!";
const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;
const SYMLINK_MODE = 0o777;
const PARENT_DIR_MODE = 0o755;
const FIXED_MTIME = 0;

/** Archive paths are relative ("usr/bin/etcd"); "/usr/bin/etcd" is accepted. */
function normalise(path: string): string {
  const clean = path.replace(/^\/+/, "").replace(/\/+$/, "");
  if (clean === "" || clean.split("/").some((part) => part === "" || part === "." || part === "..")) {
    throw new ImageBuildError(`invalid cpio path ${JSON.stringify(path)}`);
  }
  return clean;
}

/** Entries sorted by path, with missing parent directories added; duplicates are an error. */
export function completeEntries(entries: readonly CpioEntry[]): CpioEntry[] {
  const byPath = new Map<string, CpioEntry>();
  for (const entry of entries) {
    const path = normalise(entry.path);
    if (byPath.has(path)) throw new ImageBuildError(`duplicate cpio path ${path}`);
    byPath.set(path, { ...entry, path });
  }
  for (const path of [...byPath.keys()]) {
    const parts = path.split("/");
    for (let i = 1; i < parts.length; i++) {
      const parent = parts.slice(0, i).join("/");
      const existing = byPath.get(parent);
      if (existing === undefined) byPath.set(parent, { kind: "dir", path: parent, mode: PARENT_DIR_MODE });
      else if (existing.kind !== "dir") throw new ImageBuildError(`cpio path ${path} lies below ${parent}, which is a ${existing.kind}`);
    }
  }
  // Byte order, not locale order: a prefix (the parent) sorts before its
  // extensions. A file marked last has its parents before it all the same.
  const isLast = (entry: CpioEntry) => (entry.kind === "file" && entry.last === true ? 1 : 0);
  return [...byPath.values()].sort((a, b) => isLast(a) - isLast(b) || (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
}

function hex8(value: number): string {
  return value.toString(16).toUpperCase().padStart(8, "0");
}

function padding(length: number): Uint8Array {
  return new Uint8Array((ALIGN - (length % ALIGN)) % ALIGN);
}

function header(fields: { ino: number; mode: number; nlink: number; size: number; rdevMajor: number; rdevMinor: number; nameBytes: number }): string {
  return MAGIC + [fields.ino, fields.mode, 0, 0, fields.nlink, FIXED_MTIME, fields.size, 0, 0, fields.rdevMajor, fields.rdevMinor, fields.nameBytes, 0].map(hex8).join("");
}

/** What one entry stores: its mode with file type, link count, data and device. */
function describe(entry: CpioEntry): { mode: number; nlink: number; data: Uint8Array; rdev: [number, number] } {
  switch (entry.kind) {
    case "dir":
      return { mode: S_IFDIR | entry.mode, nlink: 2, data: new Uint8Array(), rdev: [0, 0] };
    case "file": {
      const data = typeof entry.contents === "string" ? new Uint8Array(readFileSync(entry.contents)) : entry.contents;
      return { mode: S_IFREG | entry.mode, nlink: 1, data, rdev: [0, 0] };
    }
    case "symlink":
      return { mode: S_IFLNK | SYMLINK_MODE, nlink: 1, data: new TextEncoder().encode(entry.target), rdev: [0, 0] };
    case "chardev":
      return { mode: S_IFCHR | entry.mode, nlink: 1, data: new Uint8Array(), rdev: [entry.major, entry.minor] };
    default: {
      const never: never = entry;
      throw new ImageBuildError(`unknown cpio entry ${JSON.stringify(never)}`);
    }
  }
}

/**
 * Writes entries (completed with parents, sorted) as a newc archive to dest,
 * atomically (via dest.partial). Returns the archive's size in bytes.
 */
export function writeCpio(dest: string, entries: readonly CpioEntry[]): number {
  const partial = `${dest}.partial`;
  const fd = openSync(partial, "w");
  let offset = 0;
  const put = (bytes: Uint8Array): void => {
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
    offset += bytes.length;
  };
  const putEntry = (ino: number, name: string, what: ReturnType<typeof describe>): void => {
    const nameBytes = new TextEncoder().encode(name + "\0");
    const head = new TextEncoder().encode(header({ ino, mode: what.mode, nlink: what.nlink, size: what.data.length, rdevMajor: what.rdev[0], rdevMinor: what.rdev[1], nameBytes: nameBytes.length }));
    put(head);
    put(nameBytes);
    put(padding(HEADER_BYTES + nameBytes.length));
    put(what.data);
    put(padding(what.data.length));
  };
  try {
    let ino = 1;
    for (const entry of completeEntries(entries)) putEntry(ino++, entry.path, describe(entry));
    putEntry(0, TRAILER, { mode: 0, nlink: 1, data: new Uint8Array(), rdev: [0, 0] });
  } finally {
    closeSync(fd);
  }
  renameSync(partial, dest);
  return offset;
}
