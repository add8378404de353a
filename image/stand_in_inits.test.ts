// The stand-in inits (image/smoke_init.ts for the image smoke test,
// bench/floor_init.ts for bench/boot.ts's floor) are built into images
// like the real init, and the image build asks every init for
// `--version`. Off PID 1 they must answer that, and do nothing else: the
// smoke init formats a disk and powers the machine off as PID 1. (The
// floor's lack of an answer kept bench/boot.ts from running, issue 47.)

import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { REPO_ROOT } from "./layout.ts";

const INITS = [
  { file: "image/smoke_init.ts", version: "smoke-stand-in" },
  { file: "bench/floor_init.ts", version: "floor-stand-in" },
];

describe("the stand-in inits off PID 1", () => {
  for (const { file, version } of INITS) {
    test(`${file} answers --version as the image build asks, and refuses to do anything else`, () => {
      const asked = Bun.spawnSync([process.execPath, join(REPO_ROOT, file), "--version"], { stdout: "pipe", stderr: "pipe" });
      expect({ code: asked.exitCode, out: asked.stdout.toString() }).toEqual({ code: 0, out: `${version}\n` });
      // The image build takes the answer as the slot's version (image/mod.ts).
      expect(version).toMatch(/^[\x21-\x7e]{1,64}$/);
      const run = Bun.spawnSync([process.execPath, join(REPO_ROOT, file)], { stdout: "pipe", stderr: "pipe" });
      expect(run.exitCode).toBe(2);
      expect(run.stdout.toString()).toBe("");
      expect(run.stderr.toString()).toContain("not PID 1, doing nothing");
    });
  }
});
