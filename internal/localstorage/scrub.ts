// Overwriting a file system's free space with zeros. A file replaced on the
// FAT ESP leaves its old clusters on the disk until something else is
// written there: a sealed configuration that once held the cold-start key
// would leave that key readable to anyone with the disk and a forensic tool,
// although no file holds it any more. So when the key leaves the ESP, the
// node fills the ESP's free space with zeros, syncs, and deletes the filler
// (internal/coldstart, README "Cold start"). It happens once per key removal.
//
//   syncfs(ESP) ─▶ zeros, 1 MiB at a time, fdatasync every 8 MiB, until full
//               ─▶ fdatasync ─▶ filler removed ─▶ syncfs(ESP)
//
// The ESP is synced before the zeros go out and after the filler is gone,
// so that no directory entry still on its way to the disk names a cluster
// the zeros are about to overwrite. (A replaced file's entry used to reach
// the disk only at its inode's writeback; zeroing the clusters it still
// named, then losing power, left a node with a sealed configuration of
// zeros — qemu fault run, seed 11. The ESP is now mounted with dirsync and
// writeFileDurably fsyncs the renamed file, so that entry is on disk when
// the write returns; the sync stays for any other write.) The sync is the
// ESP's own (syncfs), not sync(2): that one also flushed etcd's data
// partition and held PID 1's event loop for seconds on a busy VM, long
// enough for the curator leader to miss its peers' calls. The zeros are
// flushed every 8 MiB, so that the disk never has tens of MiB queued in
// front of etcd's own fsyncs.
//
// While the filler is there every other write to the ESP would fail with
// ENOSPC, so the scrub holds the ESP's exclusive lock (exclusive.ts) and the
// node's ESP writers take it too.

import { open, rm } from "node:fs/promises";
import { join } from "node:path";
import { syncfs } from "../sys/mod.ts";
import { exclusively } from "./exclusive.ts";

/** The file that fills the free space while a scrub runs; one left by a power cut mid-scrub is removed when the ESP is mounted (mountESP). */
export const SCRUB_FILLER = ".scrub";

const CHUNK_BYTES = 1024 * 1024;
/** Zeros written between flushes. */
const FLUSH_EVERY_BYTES = 8 * CHUNK_BYTES;

/** Flushes the file system `dir` is on, and only that one. */
async function syncFileSystem(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    syncfs(handle.fd, dir);
  } finally {
    await handle.close();
  }
}

/**
 * Fills `dir`'s file system with zeros until it is full, flushes them, and
 * removes the filler; returns the bytes written. `dir` is the file system's
 * mount point: the exclusive lock is taken on it.
 */
export function scrubFreeSpace(dir: string): Promise<number> {
  return exclusively(dir, async () => {
    const filler = join(dir, SCRUB_FILLER);
    const zeros = Buffer.alloc(CHUNK_BYTES);
    // Every earlier replacement's directory entry on disk before its old clusters are zeroed.
    await syncFileSystem(dir);
    let written = 0;
    let unflushed = 0;
    const handle = await open(filler, "w", 0o600);
    try {
      for (let chunk = CHUNK_BYTES; chunk >= 512;) {
        try {
          const { bytesWritten } = await handle.write(zeros, 0, chunk);
          written += bytesWritten;
          unflushed += bytesWritten;
          if (bytesWritten < chunk) chunk = Math.floor(chunk / 2);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
          chunk = Math.floor(chunk / 2);
        }
        if (unflushed >= FLUSH_EVERY_BYTES) {
          await handle.datasync();
          unflushed = 0;
        }
      }
      await handle.sync();
    } finally {
      await handle.close();
      await rm(filler, { force: true });
      await syncFileSystem(dir);
    }
    return written;
  });
}
