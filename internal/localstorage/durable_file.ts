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
//   write <path>.tmp ─ fsync ─ rename over <path> ─ fsync <path> ─ fsync the directory
//
// A reader then sees either the old file or the new one, both complete.
// The fsync of <path> after the rename is for FAT (the ESP): there the
// renamed file takes over the replaced file's directory entry, and that
// entry is rewritten only when the renamed file's inode is written back,
// not by a directory fsync; the replaced file's clusters are freed at once.
// (The ESP is also mounted with dirsync, which writes the entry during the
// rename: mountESP.)
//
// writeFileDurably blocks the thread for the fsyncs: fine while the node
// enrols and nothing else runs yet. Once services run, an fsync behind a
// busy disk (etcd's own writes through dm-crypt on a VM) can take seconds,
// and PID 1's event loop would stand still with it — calls unanswered,
// child output unread. So the writers that run beside the services (held
// shares, the sealed configuration's updates) use writeFileDurablyAsync,
// whose fsyncs run off the event loop.

import { closeSync, fsyncSync, mkdirSync, openSync, readSync, renameSync, rmSync, writeSync } from "node:fs";
import { mkdir, open, rename, rm } from "node:fs/promises";
import { dirname } from "node:path";

export function writeFileDurably(path: string, data: string | Uint8Array, options: { mode?: number } = {}): void {
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  replaceFromTemporary(path, options.mode, (fd) => {
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written, bytes.length - written);
  });
}

/**
 * The frame of every durable write: `fill` writes <path>.tmp, which is then
 * fsynced and renamed over path (replaceDurably); on a failure the
 * temporary file goes and path is left as it was.
 */
function replaceFromTemporary(path: string, mode: number | undefined, fill: (fd: number) => void): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const temporary = `${path}.tmp`;
  const fd = openSync(temporary, "w", mode ?? 0o600);
  try {
    fill(fd);
    fsyncSync(fd);
  } catch (err) {
    closeSync(fd);
    rmSync(temporary, { force: true });
    throw err;
  }
  closeSync(fd);
  replaceDurably(temporary, path);
}

const COPY_CHUNK_BYTES = 1024 * 1024;

/** Appends the whole of the file at fromPath to the open fd, a chunk at a time (files too large to hold in memory). */
export function appendFileTo(fromPath: string, fd: number): void {
  const from = openSync(fromPath, "r");
  try {
    const chunk = Buffer.alloc(COPY_CHUNK_BYTES);
    for (;;) {
      const n = readSync(from, chunk, 0, chunk.length, null);
      if (n === 0) break;
      let written = 0;
      while (written < n) written += writeSync(fd, chunk, written, n - written);
    }
  } finally {
    closeSync(from);
  }
}

/** writeFileDurably with the writes and fsyncs off the event loop. */
export async function writeFileDurablyAsync(path: string, data: string | Uint8Array, options: { mode?: number } = {}): Promise<void> {
  const dir = dirname(path);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const temporary = `${path}.tmp`;
  const bytes = typeof data === "string" ? Buffer.from(data) : data;
  const handle = await open(temporary, "w", options.mode ?? 0o600);
  try {
    let written = 0;
    while (written < bytes.length) written += (await handle.write(bytes, written, bytes.length - written)).bytesWritten;
    await handle.sync();
  } catch (err) {
    await handle.close();
    await rm(temporary, { force: true });
    throw err;
  }
  await handle.close();
  await rename(temporary, path);
  const renamed = await open(path, "r");
  try {
    await renamed.sync();
  } finally {
    await renamed.close();
  }
  const directory = await open(dir, "r");
  try {
    await directory.sync();
  } catch {
    // As in syncDirectory: FAT does not sync directories.
  } finally {
    await directory.close();
  }
}

/** Renames a written and fsynced temporary file over path, then fsyncs path (for FAT) and its directory (an update's files arrive as <name>.tmp on the ESP and are installed by this). */
export function replaceDurably(temporary: string, path: string): void {
  renameSync(temporary, path);
  const renamed = openSync(path, "r");
  try {
    fsyncSync(renamed);
  } finally {
    closeSync(renamed);
  }
  syncDirectory(dirname(path));
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
