// The Kubernetes worker's container runtime in a node process: containerd
// and runc from the system tree (built from their Go modules) run the runtime
// probe container while the node holds the kubernetes-worker role, and
// nothing of it is left once the role is taken away. The qemu e2e does the
// same in a VM (test/e2e/cluster.e2e.ts).

import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { helloImage, HOST_BUSYBOX, readBusybox } from "../image/mod.ts";
import { join } from "node:path";
import { killCgroup, processesIn, runtimeCgroupName, unifiedCgroupRoot } from "../internal/containerd/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode, serviceLines } from "./support/node_process.ts";

const dir = tempDir("nodecore-runtime-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(11));
const { ctl, bootstrap } = ownedNode(node, dir.path);
const cgroup = join(unifiedCgroupRoot() ?? "/sys/fs/cgroup", runtimeCgroupName(node.root));

afterAll(async () => {
  await node.stop();
  await killCgroup(cgroup); // in case a step failed with the container running
  dir[Symbol.dispose]();
}, 60_000);

const containerdLine = async (id: string) => (await serviceLines(ctl, id)).get("containerd");

test("kubernetes-worker runs the probe container with the built containerd, and removing the role leaves no process behind", async () => {
  const id = String((await bootstrap()).node);

  const from = node.logs.length;
  expect((await ctl("node", "roles", "set", id, "kubernetes-worker")).code).toBe(0);
  const report = await node.waitForLog((l) => /^runtime probe: pid /.test(l.msg), { from, timeoutMs: 90_000, what: "the container's report" });
  expect(report.component).toBe("root.roleserve.kubernetes.worker.runtime.probe.output");
  expect(report.msg).toBe(`runtime probe: pid 1, root overlay, cgroup 0::/${cgroup.split("/").at(-1)}/containers/runtime-probe`);
  await eventually(async () => expect((await containerdLine(id))?.state).toBe("running"), { timeoutMs: 30_000, what: "containerd running in the status" });
  // containerd, its shim, and the container's shell and sleep.
  expect(processesIn(cgroup).length).toBeGreaterThanOrEqual(3);

  // An offline bundle, as an operator imports one: checked on the way, in the store after.
  const bundle = join(dir.path, "offline.oci.tar");
  writeFileSync(bundle, helloImage(readBusybox(HOST_BUSYBOX), "offline.example.com/apps/offline:1", "imported, not pulled"));
  const imported = await ctl("image", "import", bundle, "--json");
  expect(imported.stderr).toContain(`${id}: imported offline.example.com/apps/offline:1`);
  expect(imported.code).toBe(0);
  expect(JSON.parse(imported.stdout)).toMatchObject({ images: ["offline.example.com/apps/offline:1"], nodes: [{ node: id, images: ["offline.example.com/apps/offline:1"] }] });
  const listed = JSON.parse((await ctl("image", "list", "--node", id, "--json")).stdout) as { node: string; images: { name: string; digest: string }[] }[];
  expect(listed[0]!.images.find((i) => i.name === "offline.example.com/apps/offline:1")?.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
  const truncated = join(dir.path, "truncated.oci.tar");
  writeFileSync(truncated, readFileSync(bundle).subarray(0, 5000));
  const refused = await ctl("image", "import", truncated);
  expect(refused.code).not.toBe(0);
  expect(refused.stderr).toContain("cut short");
  expect(refused.stderr).toContain("nothing was sent");

  const unsetFrom = node.logs.length;
  expect((await ctl("node", "roles", "unset", id, "kubernetes-worker")).code).toBe(0);
  await eventually(async () => expect((await containerdLine(id))?.state).toBe("not-assigned"), { timeoutMs: 30_000, what: "containerd not-assigned in the status" });
  expect((await containerdLine(id))?.message).toBe(`no kubernetes-worker role; no container process left (${cgroup} is empty)`);
  expect(existsSync(cgroup)).toBe(false);
  // How much is left for the cgroup sweep depends on timing: the probe's
  // shell exits on the TERM that ctr passes on, and ctr may delete the task
  // (and so end the shim) within its grace. Whatever the sweep stopped, it
  // says so, once.
  const stopped = node.logs.slice(unsetFrom).filter((l) => l.msg === "stopped what the container runtime left running");
  expect(stopped.length).toBeLessThanOrEqual(1);
  for (const line of stopped) expect(Number(line.processes)).toBeGreaterThanOrEqual(1);
}, 180_000);
