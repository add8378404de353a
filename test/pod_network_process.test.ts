// containerd starts before the node knows its pod prefix (the curator's
// answer can take minutes on a loaded cluster): CRI must take the pods'
// network written afterwards, without a restart. The built containerd with
// CRI on, as a worker runs it; its Status as the kubelet asks it.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { cniPaths, writeCniConflist } from "../internal/containerd/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { startCriContainerd } from "./support/cri.ts";

const dir = tempDir("nodecore-pod-network-");
let runtime: Awaited<ReturnType<typeof startCriContainerd>>;

beforeAll(async () => {
  runtime = await startCriContainerd(undefined, join(dir.path, "containerd"), `nodecore-pod-network-${process.pid}`);
});

afterAll(async () => {
  await runtime?.stop();
  dir[Symbol.dispose]();
});

test("CRI reports the network not ready until the pods' network is written, then ready, with the same containerd", async () => {
  const before = await eventually(() => runtime.images.conditions(), { timeoutMs: 30_000, intervalMs: 250, what: "CRI's status" });
  expect(before.RuntimeReady).toBe(true);
  expect(before.NetworkReady).toBe(false);
  expect(existsSync(cniPaths(runtime.paths).conflist)).toBe(false);
  writeCniConflist(runtime.paths, "10.244.7.0/24");
  await eventually(
    async () => {
      const now = await runtime.images.conditions();
      if (!now.NetworkReady) throw new Error(`NetworkReady is still false: ${JSON.stringify(now)}`);
    },
    { timeoutMs: 15_000, intervalMs: 250, what: "CRI's network ready" },
  );
  expect(runtime.process.exitCode).toBeNull();
});
