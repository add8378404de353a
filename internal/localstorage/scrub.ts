// Overwriting a file system's free space with zeros. A file replaced on the
// FAT ESP leaves its old clusters on the disk until something else is
// written there: a sealed configuration that once held the cold-start key
// would leave that key readable to anyone with the disk and a forensic tool,
// although no file holds it any more. So when the key leaves the ESP, the
// node fills the ESP's free space with zeros, syncs, and deletes the filler
// (internal/coldstart, README "Cold start"). The ESP is small (tens of MiB),
// so this takes about a second, and it happens once per key removal.
//
// The file systems are synced (sync(2)) before the zeros go out and after
// the filler is gone. FAT's directories are not made durable by an fsync,
// so a file just replaced (the sealed configuration, written with
// writeFileDurably) can still have its old directory entry on disk, naming
// the clusters the replacement freed; zeroing those clusters before that
// entry is written, then losing power, left a node with a sealed
// configuration of zeros, or with an ESP whose reads failed with "invalid
// cluster chain" (qemu fault run, seed 11, plug pulled about 10 s after a
// scrub).

import { open, rm } from "node:fs/promises";
import { join } from "node:path";
import { sync } from "../sys/mod.ts";

const CHUNK_BYTES = 1024 * 1024;

/** Fills `dir`'s file system with zeros until it is full, syncs, and removes the filler; returns the bytes written. */
export async function scrubFreeSpace(dir: string): Promise<number> {
  const filler = join(dir, ".scrub");
  const zeros = Buffer.alloc(CHUNK_BYTES);
  // Every earlier replacement's directory entry on disk before its old clusters are zeroed.
  sync();
  let written = 0;
  const handle = await open(filler, "w", 0o600);
  try {
    for (let chunk = CHUNK_BYTES; chunk >= 512; ) {
      try {
        const { bytesWritten } = await handle.write(zeros, 0, chunk);
        written += bytesWritten;
        if (bytesWritten < chunk) chunk = Math.floor(chunk / 2);
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
        chunk = Math.floor(chunk / 2);
      }
    }
    await handle.sync();
  } finally {
    await handle.close();
    await rm(filler, { force: true });
    sync();
  }
  return written;
}
