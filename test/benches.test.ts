// Every bench still loads and reads its command line (issue 47: bench/boot.ts
// had stopped running, and nobody knew until a session tried it). Each runs
// with --help, which must print its usage and exit 0 before it builds or
// launches anything, and with a flag it does not know, which must be one
// line naming it and exit 2. The figures themselves are the benches' own
// business: they are run by hand and printed, never asserted here.

import { describe, expect, test } from "bun:test";
import { readdirSync } from "node:fs";
import { join } from "node:path";
import { REPO_ROOT } from "../image/mod.ts";

const BENCH_DIR = join(REPO_ROOT, "bench");
/** What bench/ holds besides benches: helpers, and the floor's stand-in init (image/stand_in_inits.test.ts builds it). */
const NOT_BENCHES = new Set(["args.ts", "figures.ts", "owner_kubectl.ts", "random_image.ts", "floor_init.ts"]);
const benches = readdirSync(BENCH_DIR)
  .filter((f) => f.endsWith(".ts") && !f.endsWith(".test.ts") && !NOT_BENCHES.has(f))
  .sort();

function run(bench: string, ...args: string[]) {
  const result = Bun.spawnSync([process.execPath, join(BENCH_DIR, bench), ...args], { cwd: REPO_ROOT, stdout: "pipe", stderr: "pipe", timeout: 30_000 });
  return { code: result.exitCode, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

describe("every bench", () => {
  test("there are benches to check", () => {
    expect(benches.length).toBeGreaterThan(15);
  });

  test.each(benches)("%s: --help prints its usage and exits 0; an unknown flag is one line and exit 2", (bench) => {
    const help = run(bench, "--help");
    expect({ code: help.code, stderr: help.stderr }).toEqual({ code: 0, stderr: "" });
    expect(help.stdout.startsWith(`usage: bun bench/${bench}`)).toBe(true);
    const wrong = run(bench, "--no-such-flag");
    expect(wrong.code).toBe(2);
    expect(wrong.stderr.trim().split("\n")).toEqual([expect.stringContaining("--no-such-flag")]);
  });
});
