// The code's layout is the formatter's, not anyone's taste: prettier (a dev
// dependency, .prettierrc.json) checks every TypeScript file the repository
// holds, generated code aside (.prettierignore). A file it would change
// fails this test; `bun run format` writes them as it wants.

import { expect, test } from "bun:test";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");

test("every TypeScript file is as the formatter writes it", () => {
  const files = Bun.spawnSync(["git", "ls-files", "*.ts"], { cwd: ROOT }).stdout.toString().split("\n").filter(Boolean);
  expect(files.length).toBeGreaterThan(100);
  const checked = Bun.spawnSync([join(ROOT, "node_modules", ".bin", "prettier"), "--list-different", ...files], { cwd: ROOT });
  const different = checked.stdout.toString().split("\n").filter(Boolean);
  // 0: all formatted; 1: some are not (listed); 2: prettier itself failed.
  expect(checked.stderr.toString()).toBe("");
  expect(different).toEqual([]);
  expect(checked.exitCode).toBe(0);
}, 120_000);
