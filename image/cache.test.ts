// The chunk digests an update bundle lists: each chunkBytes of the file
// hashed on its own, the last one shorter, read as a stream whose pieces do
// not line up with the chunks.

import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../internal/testing/mod.ts";
import { chunkDigests } from "./cache.ts";

const sha256 = (bytes: Uint8Array) => new Bun.CryptoHasher("sha256").update(bytes).digest("hex");

describe("chunkDigests", () => {
  test("hashes each chunk of the file in order, the last one shorter, whatever the stream's pieces", async () => {
    using dir = tempDir();
    const chunkBytes = 100_003; // Prime, so that no stream piece boundary lines up with it.
    for (const size of [0, 1, chunkBytes - 1, chunkBytes, chunkBytes + 1, 5 * chunkBytes + 77_777, 3 * 1024 * 1024]) {
      const bytes = randomBytes(size);
      const file = join(dir.path, `f${size}`);
      writeFileSync(file, bytes);
      const expected: string[] = [];
      for (let at = 0; at < size; at += chunkBytes) expected.push(sha256(bytes.subarray(at, at + chunkBytes)));
      expect(await chunkDigests(file, chunkBytes)).toEqual(expected);
    }
  });
});

/** Random bytes beyond getRandomValues's 64 KiB limit. */
function randomBytes(size: number): Uint8Array {
  const bytes = new Uint8Array(size);
  for (let at = 0; at < size; at += 65536) crypto.getRandomValues(bytes.subarray(at, Math.min(size, at + 65536)));
  return bytes;
}
