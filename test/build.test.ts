// The build produces both binaries, and they run where node_modules does not
// exist (as on a node): node_modules is hidden under an empty tmpfs in a
// private mount namespace while the binaries run.

import { beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";

const ROOT = join(import.meta.dir, "..");
const NODE_MODULES = join(ROOT, "node_modules");

beforeAll(() => {
  const result = Bun.spawnSync([process.execPath, "run", "build"], { cwd: ROOT, stdout: "pipe", stderr: "pipe" });
  if (result.exitCode !== 0) throw new Error(`bun run build failed:\n${result.stderr}`);
}, 300_000);

function runWithoutNodeModules(command: string[]): { exitCode: number; stdout: string; stderr: string } {
  const script = `mount -t tmpfs empty ${NODE_MODULES} && test -z "$(ls -A ${NODE_MODULES})" && exec "$@"`;
  const result = Bun.spawnSync(["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", ...command], {
    cwd: "/",
    stdout: "pipe",
    stderr: "pipe",
  });
  return { exitCode: result.exitCode ?? -1, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
}

describe("bun run build", () => {
  test("out/init runs its self-check without node_modules, loading its lazily loaded parts", () => {
    const result = runWithoutNodeModules([join(ROOT, "out/init"), "selfcheck"]);
    expect(result.stderr).toBe("");
    expect(result.stdout).toContain("selfcheck ok: etcd client, API messages and node code load");
    expect(result.exitCode).toBe(0);
  });

  test("out/init and out/ctl print the same stamped version", () => {
    const init = runWithoutNodeModules([join(ROOT, "out/init"), "--version"]);
    const ctl = runWithoutNodeModules([join(ROOT, "out/ctl"), "version"]);
    expect(init.stdout.trim()).toMatch(/^\d+\.\d+\.\d+\+\w+$/);
    expect(ctl.stdout.trim()).toBe(init.stdout.trim());
  });
});
