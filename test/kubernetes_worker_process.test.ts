// The kubelet in a node process, against kube-stub (the labelled stand-in,
// test/support/kube_stub) and the host's real containerd with CRI on: the
// kubernetes-worker role gets the kubelet its certificates from the curator,
// starts it in the runtime's cgroup once containerd answers, and the
// stand-in checks its configuration, its identity and containerd's CRI
// socket, and registers its Node with the stand-in apiserver. Taking the
// role away stops it and leaves the runtime's cgroup empty.

import { afterAll, expect, test } from "bun:test";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { killCgroup, processesIn, runtimeCgroupName, unifiedCgroupRoot } from "../internal/containerd/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { readStubRecord, stubSystemTree } from "./support/kube_stub/install.ts";
import { NodeProcess, loopbackBlock, ownedNode, serviceLines } from "./support/node_process.ts";

const dir = tempDir("nodecore-kubelet-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(31));
const { ctl, bootstrap } = ownedNode(node, dir.path);
const recordPath = join(dir.path, "kube-stub.jsonl");
const cgroup = join(unifiedCgroupRoot() ?? "/sys/fs/cgroup", runtimeCgroupName(node.root));

afterAll(async () => {
  await node.stop();
  await killCgroup(cgroup);
  dir[Symbol.dispose]();
}, 60_000);

const services = (id: string) => serviceLines(ctl, id);

test("kubernetes-worker runs the kubelet with curator-issued certificates beside containerd's CRI, and removing the role stops it", async () => {
  node.system = stubSystemTree(join(dir.path, "system"), { record: recordPath });
  const id = String((await bootstrap()).node);
  // node1 is a controller from the start: the apiserver the kubelet will find.
  await eventually(async () => expect((await services(id)).get("kube-apiserver")?.state).toBe("running"), { timeoutMs: 60_000, what: "the apiserver running" });

  expect((await ctl("node", "roles", "set", id, "kubernetes-worker")).code).toBe(0);
  await eventually(
    async () => {
      const lines = await services(id);
      expect(lines.get("kubelet")?.state).toBe("running");
      expect(lines.get("containerd")?.state).toBe("running");
    },
    { timeoutMs: 90_000, what: "the kubelet and containerd running in the node's status" },
  );
  const record = await readStubRecord(recordPath);
  expect(record.filter((r) => r.event === "refused")).toEqual([]);
  const kubelet = record.find((r) => r.component === "kubelet" && r.event === "checked")!;
  expect(kubelet.user).toBe(`system:node:${id}`);
  // The kubelet registered its Node, as itself, in system:nodes.
  const registration = record.find((r) => r.event === "request" && r.method === "POST" && r.path === "/api/v1/nodes")!;
  expect(registration.user).toBe(`system:node:${id}`);
  expect(registration.groups).toEqual(["system:nodes"]);
  expect((registration.body as { metadata: { name: string } }).metadata.name).toBe(id);
  // It runs in the runtime's cgroup, with containerd.
  const started = record.find((r) => r.component === "kubelet" && r.event === "started")!;
  expect(processesIn(join(cgroup, "kubelet"))).toContain(Number(started.pid));

  expect((await ctl("node", "roles", "unset", id, "kubernetes-worker")).code).toBe(0);
  await eventually(
    async () => {
      const lines = await services(id);
      expect(lines.has("kubelet")).toBe(false);
      expect(lines.get("containerd")?.state).toBe("not-assigned");
    },
    { timeoutMs: 60_000, what: "the kubelet gone from the status and containerd not-assigned" },
  );
  expect((await readStubRecord(recordPath)).some((r) => r.component === "kubelet" && r.event === "stopped")).toBe(true);
  expect(existsSync(cgroup)).toBe(false);
}, 240_000);
