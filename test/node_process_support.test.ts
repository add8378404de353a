// The process tests' node harness (test/support/node_process.ts): what a
// stopped node process leaves behind.

import { expect, test } from "bun:test";
import { copyFileSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { killLeftShims } from "./support/node_process.ts";

test("a stopped node's containerd shims are killed, found by the node's root on their command line; other processes under it, and other nodes' shims, are left", async () => {
  using dir = tempDir();
  const root = join(dir.path, "node1");
  const other = join(dir.path, "node2");
  for (const d of [root, other, join(dir.path, "bin")]) mkdirSync(d, { recursive: true });
  // A stand-in shim: a program named as containerd's shim, holding a file under the node's root (tail -f).
  const shim = join(dir.path, "bin", "containerd-shim-runc-v2");
  copyFileSync("/usr/bin/tail", shim);
  for (const d of [root, other]) writeFileSync(join(d, "containerd.sock"), "");
  const spawn = (argv: string[]) => Bun.spawn(argv, { stdout: "ignore", stderr: "ignore" });
  const ours = spawn([shim, "-f", join(root, "containerd.sock")]);
  const notShim = spawn(["tail", "-f", join(root, "containerd.sock")]);
  const theirs = spawn([shim, "-f", join(other, "containerd.sock")]);
  try {
    await eventually(() => expect(killLeftShims(root)).toEqual([ours.pid]), { timeoutMs: 5_000 });
    await ours.exited;
    expect(ours.signalCode).toBe("SIGKILL");
    expect(notShim.exitCode).toBeNull();
    expect(theirs.exitCode).toBeNull();
  } finally {
    for (const p of [ours, notShim, theirs]) p.kill("SIGKILL");
  }
});
