// A file's bytes as the requests of a client stream carry them (ctl node
// update's bundle files, ctl image import's bundle).

import { closeSync, openSync, readSync } from "node:fs";

/** Bytes per request: well under the node's per-request limit (1 MiB). */
export const REQUEST_CHUNK_BYTES = 512 * 1024;

/** The bytes of `path` from `from` up to `end` (its end if not given), REQUEST_CHUNK_BYTES at a time. */
export function* fileChunks(path: string, from = 0, end = Number.POSITIVE_INFINITY): Generator<Uint8Array> {
  const fd = openSync(path, "r");
  try {
    const buffer = Buffer.alloc(REQUEST_CHUNK_BYTES);
    for (let position = from; position < end;) {
      const n = readSync(fd, buffer, 0, Math.min(buffer.length, end - position), position);
      if (n === 0) break;
      position += n;
      // A copy: the buffer is reused while the request may still be queued.
      yield new Uint8Array(buffer.subarray(0, n));
    }
  } finally {
    closeSync(fd);
  }
}
