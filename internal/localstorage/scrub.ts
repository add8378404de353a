// Overwriting a file system's free space with zeros. A file replaced on the
// FAT ESP leaves its old clusters on the disk until something else is
// written there: a sealed configuration that once held the cold-start key
// would leave that key readable to anyone with the disk and a forensic tool,
// although no file holds it any more. So when the key leaves the ESP, the
// node fills the ESP's free space with zeros, syncs, and deletes the filler
// (internal/coldstart, README "Cold start"). The ESP is small (tens of MiB),
// so this takes about a second, and it happens once per key removal.
//
// The deletion is synced too (the directory's fsync flushes FAT's table
// with it). A qemu fault run (seed 11) pulled the plug about 10 s after a
// scrub and a later durable ESP write, and the node came back with an ESP
// whose reads all failed with EIO: "invalid cluster chain". The likely
// cause is this deletion left in the page cache: a later fsync on the ESP
// flushes the whole allocation table (the filler's clusters freed) but not
// the directory that still named the filler.

import { open, rm } from "node:fs/promises";
import { join } from "node:path";
import { syncDirectory } from "./durable_file.ts";

const CHUNK_BYTES = 1024 * 1024;

/** Fills `dir`'s file system with zeros until it is full, syncs, and removes the filler; returns the bytes written. */
export async function scrubFreeSpace(dir: string): Promise<number> {
  const filler = join(dir, ".scrub");
  const zeros = Buffer.alloc(CHUNK_BYTES);
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
    syncDirectory(dir);
  }
  return written;
}
