import { expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { fileChunks, REQUEST_CHUNK_BYTES } from "./file_chunks.ts";

test("a file's bytes in request-sized chunks, from an offset, up to an end, each chunk its own copy", () => {
  using dir = tempDir();
  const path = join(dir.path, "file");
  const bytes = new Uint8Array(2 * REQUEST_CHUNK_BYTES + 1000).map((_, i) => i % 251);
  writeFileSync(path, bytes);
  const whole = [...fileChunks(path)];
  expect(whole.map((c) => c.length)).toEqual([REQUEST_CHUNK_BYTES, REQUEST_CHUNK_BYTES, 1000]);
  expect(Buffer.concat(whole)).toEqual(Buffer.from(bytes));
  // Chunks do not share the reader's buffer.
  expect(whole[0]!.buffer).not.toBe(whole[1]!.buffer);
  expect(Buffer.concat([...fileChunks(path, REQUEST_CHUNK_BYTES + 5)])).toEqual(Buffer.from(bytes.subarray(REQUEST_CHUNK_BYTES + 5)));
  expect(Buffer.concat([...fileChunks(path, 10, 30)])).toEqual(Buffer.from(bytes.subarray(10, 30)));
});
