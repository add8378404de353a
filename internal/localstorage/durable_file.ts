// Writing a file so that it survives a power cut: whole or not at all.
//
// A plain writeFileSync on ext4 leaves the data in the page cache; ext4
// allocates its blocks later (delayed allocation), so a power cut within
// the next half minute or so can leave the file at length zero although
// its name is on disk. The fault suite found exactly that: a node whose
// plug was pulled soon after enrolment came back with an empty certificate
// file and could not start again. So every file the node must find after a
// reboot goes through here:
//
//   write <path>.tmp ─ fsync ─ rename over <path> ─ fsync the directory
//
// A reader then sees either the old file or the new one, both complete.

import { closeSync, fsyncSync, mkdirSync, openSync, renameSync, rmSync, writeSync } from "node:fs";
import { dirname } from "node:path";

export function writeFileDurably(path: string, data: string | Uint8Array, options: { mode?: number } = {}): void {
  const dir = dirname(path);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const temporary = `${path}.tmp`;
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  const fd = openSync(temporary, "w", options.mode ?? 0o600);
  try {
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(temporary, { force: true });
    throw err;
  }
  closeSync(fd);
  renameSync(temporary, path);
  syncDirectory(dir);
}

/** fsync on a directory makes its entries (a rename) durable. */
export function syncDirectory(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } catch {
    // Some file systems (FAT, the ESP) do not sync directories; the rename still is atomic there.
  } finally {
    closeSync(fd);
  }
}
