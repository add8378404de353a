import { describe, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLUSTERS_ROOT, consoleTails } from "./console_tails.ts";
import { CLUSTER_DIRS } from "../launch/mod.ts";

describe("the e2e failures' console tails", () => {
  test("read where the launcher writes the consoles (the first version looked under out/image and never found one)", () => {
    expect(CLUSTERS_ROOT.endsWith(CLUSTER_DIRS)).toBe(true);
  });

  test("the last lines of each console written since the step began, colours stripped; older consoles left out", () => {
    const root = mkdtempSync(join(tmpdir(), "tails-"));
    try {
      mkdirSync(join(root, "e2e3"));
      mkdirSync(join(root, "old"));
      writeFileSync(join(root, "e2e3", "node1.console.log"), "one\n\x1b[32mtwo\x1b[0m\n\nthree   \n");
      writeFileSync(join(root, "e2e3", "node1.disk.img"), "not a console");
      writeFileSync(join(root, "old", "node1.console.log"), "from an earlier step\n");
      const since = Date.now() - 60_000;
      utimesSync(join(root, "old", "node1.console.log"), new Date(since - 60_000), new Date(since - 60_000));
      expect(consoleTails(since, root, 2)).toEqual(["  e2e3/node1, its last lines:", "    two", "    three"]);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });

  test("no cluster directory: nothing, and no error", () => {
    expect(consoleTails(0, join(tmpdir(), "no-such-clusters-dir"))).toEqual([]);
  });
});
