// The Kubernetes worker's container runtime in a node process: the host's
// containerd and runc (Debian's, as in the system image) run the runtime
// probe container while the node holds the kubernetes-worker role, and
// nothing of it is left once the role is taken away. The qemu e2e does the
// same in a VM (test/e2e/cluster.e2e.ts).

import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { busyboxImageFrom } from "../image/oci.ts";
import { HOST_BUSYBOX } from "../image/system.ts";
import { killCgroup, PROBE_IMAGE_PATH, processesIn, unifiedCgroupRoot } from "../internal/containerd/mod.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../internal/pki/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, ctl as runCtl, loopbackBlock, serviceLines } from "./support/node_process.ts";

const dir = tempDir("nodecore-runtime-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(11));
const owner = generateKeyPair();
const ownerKeyFile = join(dir.path, "owner.key");
writeFileSync(ownerKeyFile, privateKeyPem(owner.privateKey));
const ctl = (...args: string[]) => runCtl(join(dir.path, "ctl"), "--owner-key", ownerKeyFile, ...args);
// cmd/init/run_node.ts names a node process's runtime cgroup after its root.
const cgroup = join(unifiedCgroupRoot() ?? "/sys/fs/cgroup", `nodecore-runtime-${new Bun.CryptoHasher("sha256").update(node.root).digest("hex").slice(0, 12)}`);

afterAll(async () => {
  await node.stop();
  await killCgroup(cgroup); // in case a step failed with the container running
  dir[Symbol.dispose]();
}, 60_000);

const containerdLine = async (id: string) => (await serviceLines(ctl, id)).get("containerd");

test("kubernetes-worker runs the probe container with the host's containerd, and removing the role leaves no process behind", async () => {
  for (const needed of ["/usr/bin/containerd", "/usr/sbin/runc", HOST_BUSYBOX]) {
    if (!existsSync(needed)) throw new Error(`${needed} is missing: test/setup.sh installs containerd, runc and busybox-static`);
  }
  const image = join(node.root, PROBE_IMAGE_PATH);
  mkdirSync(dirname(image), { recursive: true });
  writeFileSync(image, busyboxImageFrom(HOST_BUSYBOX));

  node.writeParameters({ cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(owner.publicKey) } } } as never);
  node.start();
  const up = await node.waitForLog((l) => l.msg === "node is UP", { what: "UP" });
  const id = String(up.node);
  expect((await ctl("takeownership", node.address)).code).toBe(0);

  const from = node.logs.length;
  expect((await ctl("node", "roles", "set", id, "kubernetes-worker")).code).toBe(0);
  const report = await node.waitForLog((l) => /^runtime probe: pid /.test(l.msg), { from, timeoutMs: 90_000, what: "the container's report" });
  expect(report.component).toBe("root.roleserve.kubernetes.probe.output");
  expect(report.msg).toBe(`runtime probe: pid 1, root overlay, cgroup 0::/${cgroup.split("/").at(-1)}/containers/runtime-probe`);
  await eventually(async () => expect((await containerdLine(id))?.state).toBe("running"), { timeoutMs: 30_000, what: "containerd running in the status" });
  // containerd, its shim, and the container's shell and sleep.
  expect(processesIn(cgroup).length).toBeGreaterThanOrEqual(3);

  expect((await ctl("node", "roles", "unset", id, "kubernetes-worker")).code).toBe(0);
  const stopped = await node.waitForLog((l) => l.msg === "stopped what the container runtime left running", { from, timeoutMs: 60_000, what: "the runtime's leftovers stopped" });
  expect(Number(stopped.processes)).toBeGreaterThanOrEqual(2);
  await eventually(async () => expect((await containerdLine(id))?.state).toBe("not-assigned"), { timeoutMs: 30_000, what: "containerd not-assigned in the status" });
  expect((await containerdLine(id))?.message).toBe(`no kubernetes-worker role; no container process left (${cgroup} is empty)`);
  expect(existsSync(cgroup)).toBe(false);
}, 180_000);
