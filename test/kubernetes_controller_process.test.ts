// The Kubernetes controller in a node process, against kube-stub (the
// labelled stand-in for the Kubernetes binaries, test/support/kube_stub):
// the role launches the apiserver against the node's own etcd, then the
// controller-manager and scheduler once /readyz answers; a component that
// dies is restarted and says so; removing the role stops all three.
// What the stand-in checks (flags, certificate chains and names, etcd over
// mutual TLS) is in its own file; what it cannot prove is in the README.
// The owner's kubeconfig (ctl kubeconfig) is read by the real kubectl.

import { afterAll, expect, test } from "bun:test";
import { statSync } from "node:fs";
import { join } from "node:path";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { installKubeStub, readStubRecord } from "./support/kube_stub/install.ts";
import { NodeProcess, loopbackBlock, ownedNode, serviceLines } from "./support/node_process.ts";

const dir = tempDir("nodecore-kube-controller-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(21));
const { ctl, bootstrap } = ownedNode(node, dir.path);
const recordPath = join(dir.path, "kube-stub.jsonl");
const COMPONENTS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"];

afterAll(async () => {
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

const services = (id: string) => serviceLines(ctl, id);

test("kubernetes-controller launches the three components in order, restarts one that dies, stops them with the role, and launches them again with the same PKI", async () => {
  // A node process looks for the Kubernetes binaries in <root>/kubernetes/bin (cmd/init/run_node.ts).
  installKubeStub(join(node.root, "kubernetes", "bin"), { record: recordPath });
  const up = await bootstrap();
  const id = String(up.node);
  // The first node of a cluster is a controller from the start (internal/curator/bootstrap.ts).
  expect(up.roles).toBe("consensus,kubernetes-controller");
  await node.waitForLog((l) => l.msg === "created the Kubernetes PKI in etcd", { what: "the PKI created" });
  const allRunning = () =>
    eventually(
    async () => {
      const lines = await services(id);
      for (const name of COMPONENTS) expect(lines.get(name)?.state).toBe("running");
      expect(lines.get("kubernetes")?.state).toBe("launched");
    },
    { timeoutMs: 60_000, what: "all three components running in the node's status" },
  );
  await allRunning();

  const record = await readStubRecord(recordPath);
  expect(record.filter((r) => r.event === "refused")).toEqual([]);
  const first = (component: string, event: string) => record.find((r) => r.component === component && r.event === event);
  // The apiserver reached the node's own etcd with its own client certificate.
  expect(first("kube-apiserver", "etcd-healthy")?.url).toBe(`https://${node.address}:2379/health`);
  // Gating: the other two were started only after the apiserver served.
  const served = first("kube-apiserver", "serving")!.at;
  for (const component of ["kube-controller-manager", "kube-scheduler"]) expect(first(component, "started")!.at).toBeGreaterThanOrEqual(served);
  // Readiness came from /readyz, asked by the node core's admin identity.
  expect(record.some((r) => r.event === "request" && r.path === "/readyz" && r.user === "nodecore:admin" && (r.groups as string[]).includes("system:masters"))).toBe(true);

  // The reconciler made the base bindings, as the node core's admin identity.
  await node.waitForLog((l) => l.msg === "base objects reconciled", { what: "the reconciler done" });
  const created = (await readStubRecord(recordPath)).filter((r) => r.event === "request" && r.method === "POST");
  expect(created.map((r) => `${r.path} ${(r.body as { metadata: { name: string } }).metadata.name} ${String(r.user)}`).sort()).toEqual([
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings nodecore:apiserver-kubelet-api-admin nodecore:admin",
    "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings nodecore:owner-cluster-admin nodecore:admin",
  ]);

  // The owner's kubeconfig: a certificate as nodecore:owner over a key made by
  // ctl, pointed at the controller; the real kubectl reads it and is let in.
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  const written = await ctl("kubeconfig", kubeconfig);
  expect(written.stderr).toBe("");
  expect(written.stdout).toContain(`kubeconfig written to ${kubeconfig} (server https://${node.address}:6443, user nodecore:owner)`);
  expect(statSync(kubeconfig).mode & 0o777).toBe(0o600);
  const kubectl = Bun.spawnSync(["kubectl", "--kubeconfig", kubeconfig, "get", "--raw", "/readyz"]);
  expect(kubectl.stderr.toString()).toBe("");
  expect(kubectl.stdout.toString()).toBe("ok");
  const asOwner = (await readStubRecord(recordPath)).filter((r) => r.event === "request" && r.user === "nodecore:owner");
  expect(asOwner.map((r) => r.path)).toContain("/readyz");

  // The apiserver dies: the supervisor starts it again, and the status says so.
  const pid = Number(first("kube-apiserver", "started")!.pid);
  process.kill(pid, "SIGKILL");
  await eventually(
    async () => {
      const line = (await services(id)).get("kube-apiserver");
      expect(line?.state).toBe("running");
      expect(line?.message).toBe("after 2 starts");
    },
    { timeoutMs: 60_000, what: "the apiserver running again after its second start" },
  );

  // The role goes: all three are stopped with SIGTERM, and their lines with them.
  expect((await ctl("node", "roles", "unset", id, "kubernetes-controller")).code).toBe(0);
  await eventually(
    async () => {
      const stopped = (await readStubRecord(recordPath)).filter((r) => r.event === "stopped").map((r) => r.component);
      for (const name of COMPONENTS) expect(stopped).toContain(name);
      const lines = await services(id);
      for (const name of COMPONENTS) expect(lines.has(name)).toBe(false);
      expect(lines.get("kubernetes")?.state).toBe("not-assigned");
    },
    { timeoutMs: 60_000, what: "the components stopped and off the status" },
  );

  // The role comes back: the same PKI is read from etcd, not made again.
  const from = node.logs.length;
  expect((await ctl("node", "roles", "set", id, "kubernetes-controller")).code).toBe(0);
  await node.waitForLog((l) => l.msg === "read the Kubernetes PKI from etcd", { from, what: "the PKI read again" });
  await allRunning();
}, 240_000);
