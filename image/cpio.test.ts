import { describe, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { completeEntries, writeCpio, type CpioEntry } from "./cpio.ts";
import { ImageBuildError } from "./errors.ts";

const ENTRIES: CpioEntry[] = [
  { kind: "file", path: "/usr/bin/tool", mode: 0o755, contents: new TextEncoder().encode("abc") },
  { kind: "symlink", path: "bin", target: "usr/bin" },
  { kind: "chardev", path: "dev/console", mode: 0o600, major: 5, minor: 1 },
  { kind: "dir", path: "tmp", mode: 0o1777 },
];

function withTempDir<T>(body: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), "cpio-test-"));
  try {
    return body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

describe("cpio", () => {
  test("entries gain their parent directories and sort parents first", () => {
    expect(completeEntries(ENTRIES).map((e) => e.path)).toEqual(["bin", "dev", "dev/console", "tmp", "usr", "usr/bin", "usr/bin/tool"]);
  });

  test("a file marked last comes after every other entry, its parents before it as always", () => {
    const entries: CpioEntry[] = [
      { kind: "file", path: "/init.bin", mode: 0o755, contents: new Uint8Array([1]), last: true },
      { kind: "file", path: "/opt/z/late", mode: 0o644, contents: new Uint8Array([2]), last: true },
      ...ENTRIES,
    ];
    expect(completeEntries(entries).map((e) => e.path)).toEqual(["bin", "dev", "dev/console", "opt", "opt/z", "tmp", "usr", "usr/bin", "usr/bin/tool", "init.bin", "opt/z/late"]);
  });

  test("a duplicate path is an error", () => {
    expect(() => completeEntries([...ENTRIES, { kind: "dir", path: "tmp/", mode: 0o755 }])).toThrow(ImageBuildError);
  });

  test("the archive lists with GNU cpio as newc, modes and devices intact", () => {
    withTempDir((dir) => {
      const archive = join(dir, "a.cpio");
      const size = writeCpio(archive, ENTRIES);
      expect(size % 4).toBe(0);
      const listing = Bun.spawnSync(["cpio", "-itv", "--quiet", "-H", "newc", "-F", archive]);
      expect(listing.exitCode).toBe(0);
      const lines = listing.stdout.toString().trim().split("\n");
      expect(lines).toHaveLength(7);
      expect(lines.find((l) => l.endsWith(" dev/console"))).toStartWith("crw-------");
      expect(lines.find((l) => l.endsWith(" bin -> usr/bin"))).toStartWith("lrwxrwxrwx");
      expect(lines.find((l) => l.endsWith(" tmp"))).toStartWith("drwxrwxrwt");
      const extracted = Bun.spawnSync(["cpio", "-i", "--quiet", "--to-stdout", "-H", "newc", "-F", archive, "usr/bin/tool"]);
      expect(extracted.stdout.toString()).toBe("abc");
    });
  });

  test("the same entries give the same bytes", () => {
    withTempDir((dir) => {
      writeCpio(join(dir, "a.cpio"), ENTRIES);
      writeCpio(join(dir, "b.cpio"), [...ENTRIES].reverse());
      expect(readFileSync(join(dir, "a.cpio")).equals(readFileSync(join(dir, "b.cpio")))).toBe(true);
    });
  });
});
