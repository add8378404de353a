import { describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { writeFileDurably } from "./mod.ts";

describe("writeFileDurably", () => {
  test("writes the whole file with its mode, replaces an old one, and leaves no temporary file", () => {
    using dir = tempDir("nodecore-durable-");
    const path = join(dir.path, "state", "member.json");
    writeFileDurably(path, "first", { mode: 0o600 });
    expect(readFileSync(path, "utf8")).toBe("first");
    expect(statSync(path).mode & 0o777).toBe(0o600);
    writeFileDurably(path, new Uint8Array(100_000).fill(7));
    expect(readFileSync(path).length).toBe(100_000);
    expect(readdirSync(join(dir.path, "state"))).toEqual(["member.json"]);
  });

  test("a failed write leaves the old file as it was", () => {
    using dir = tempDir("nodecore-durable-");
    const path = join(dir.path, "file");
    writeFileSync(path, "old");
    // A directory where the temporary file would go makes the write fail.
    mkdirSync(`${path}.tmp`);
    expect(() => writeFileDurably(path, "new")).toThrow();
    expect(readFileSync(path, "utf8")).toBe("old");
  });
});
