// The Kubernetes controller in a node process, with the real components
// built from their Go modules (out/system): the role launches
// kube-apiserver against the node's own etcd, then kube-controller-manager
// and kube-scheduler and metrics-server once /readyz answers; the
// reconciler's bindings and the Metrics API's objects appear in the
// apiserver, and metrics-server answers the owner; the owner's kubeconfig works with the built kubectl; a
// component that dies is restarted and says so, and kubectl works again
// without help; removing the role stops all three; giving it back reads the
// same PKI from etcd. Then the volumes controller (volumes_controller.ts)
// against that real apiserver and controller-manager.

import { afterAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { createPrivateKey, X509Certificate } from "node:crypto";
import { join } from "node:path";
import { eventually, systemTree, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode, serviceLines } from "./support/node_process.ts";
import { cordonMark, CORDONED_BY_ANNOTATION, parseKubeconfig, POWEROFF_COMMAND } from "../internal/kubernetes/mod.ts";
import { nextChange } from "../internal/kubernetes/watch_doorbell.ts";
import { RECONCILE_RESYNC_MS, RECONCILE_TICK_MS } from "../internal/kubernetes/reconcile_pace.ts";

const dir = tempDir("nodecore-kube-controller-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(21));
const { ctl, bootstrap } = ownedNode(node, dir.path);
const COMPONENTS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "metrics-server"];
const KUBECTL = join(systemTree(), "kubernetes", "bin", "kubectl");

afterAll(async () => {
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

const services = (id: string) => serviceLines(ctl, id);

/** The built kubectl with the owner's kubeconfig; stdout, or a thrown error with its stderr. */
function kubectl(kubeconfig: string, ...args: string[]): string {
  // Bounded: a synchronous kubectl holds this process, and the test's own deadlines with it.
  const result = Bun.spawnSync([KUBECTL, "--kubeconfig", kubeconfig, "--request-timeout=30s", ...args], { timeout: 60_000 });
  if (result.exitCode !== 0) throw new Error(`kubectl ${args.join(" ")}: ${result.stderr.toString().trim()}`);
  return result.stdout.toString();
}

test("kubernetes-controller runs the real apiserver, controller-manager and scheduler in order; kubectl works as the owner; a killed apiserver comes back; the role goes and comes back with the same PKI", async () => {
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
      { timeoutMs: 120_000, intervalMs: 500, what: "all three components running in the node's status" },
    );
  await allRunning();

  // Gating: the other two were started only after the apiserver was ready.
  const started = (name: string) => node.logs.find((l) => l.msg === "process started" && String(l.command).endsWith(`/${name}`));
  const ready = node.logs.findIndex((l) => l.msg === "kube-apiserver is ready");
  expect(ready).toBeGreaterThanOrEqual(0);
  for (const name of ["kube-controller-manager", "kube-scheduler", "metrics-server"]) expect(node.logs.indexOf(started(name)!)).toBeGreaterThan(ready);

  // The owner's kubeconfig: a certificate as nodecore:owner over a key made by
  // ctl, pointed at the controller; the built kubectl reads it and is let in.
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  const written = await ctl("kubeconfig", kubeconfig);
  expect(written.stderr).toBe("");
  expect(written.stdout).toContain(`kubeconfig written to ${kubeconfig} (server https://${node.address}:6443, user nodecore:owner)`);
  expect(statSync(kubeconfig).mode & 0o777).toBe(0o600);
  expect(kubectl(kubeconfig, "get", "--raw", "/readyz")).toBe("ok");
  expect(kubectl(kubeconfig, "auth", "whoami", "-o", "jsonpath={.status.userInfo.username}")).toBe("nodecore:owner");
  // The version is stamped: the real one, not v0.0.0-master.
  expect(kubectl(kubeconfig, "version", "-o", "json")).toMatch(/"gitVersion": "v1\.37\.\d+"/);

  // The reconciler made the base bindings, as the node core's admin identity.
  await node.waitForLog((l) => l.msg === "base objects reconciled", { what: "the reconciler done" });
  const bindings = kubectl(kubeconfig, "get", "clusterrolebindings", "-o", "name");
  expect(bindings).toContain("clusterrolebinding.rbac.authorization.k8s.io/nodecore:apiserver-kubelet-api-admin");
  expect(bindings).toContain("clusterrolebinding.rbac.authorization.k8s.io/nodecore:owner-cluster-admin");
  // Persistent volumes: the default StorageClass, the plugin's CSIDriver, and
  // what a worker's provisioner may do by its group (and nothing without it).
  await node.waitForLog((l) => l.msg === "storage objects reconciled", { what: "the storage objects made" });
  const storageClass = JSON.parse(kubectl(kubeconfig, "get", "storageclass", "local", "-o", "json")) as Record<string, unknown> & { metadata: { annotations: Record<string, string> } };
  expect(storageClass).toMatchObject({ provisioner: "volumes.nodecore.local", volumeBindingMode: "WaitForFirstConsumer", reclaimPolicy: "Delete", allowVolumeExpansion: true });
  expect(storageClass.metadata.annotations["storageclass.kubernetes.io/is-default-class"]).toBe("true");
  expect(JSON.parse(kubectl(kubeconfig, "get", "csidriver", "volumes.nodecore.local", "-o", "json")).spec).toMatchObject({ attachRequired: false, storageCapacity: true });
  const canI = (...args: string[]) =>
    Bun.spawnSync([KUBECTL, "--kubeconfig", kubeconfig, "auth", "can-i", ...args], { timeout: 60_000 })
      .stdout.toString()
      .trim();
  expect(canI("create", "persistentvolumes", "--as", "nodecore:volumes:node-x", "--as-group", "nodecore:volume-provisioners")).toBe("yes");
  expect(canI("create", "csistoragecapacities.storage.k8s.io", "-n", "kube-system", "--as", "nodecore:volumes:node-x", "--as-group", "nodecore:volume-provisioners")).toBe("yes");
  expect(canI("create", "persistentvolumes", "--as", "nodecore:volumes:node-x")).toBe("no");
  expect(canI("get", "secrets", "--as", "nodecore:volumes:node-x", "--as-group", "nodecore:volume-provisioners")).toBe("no");
  // Every worker's NetworkPolicy enforcer reads what policies are judged by, and writes nothing of them.
  expect(canI("watch", "networkpolicies.networking.k8s.io", "--all-namespaces", "--as", "nodecore:network-policy")).toBe("yes");
  expect(canI("list", "pods", "--all-namespaces", "--as", "nodecore:network-policy")).toBe("yes");
  expect(canI("create", "networkpolicies.networking.k8s.io", "--as", "nodecore:network-policy")).toBe("no");
  expect(canI("get", "secrets", "--as", "nodecore:network-policy")).toBe("no");
  // The OpenAPI documents kubectl validates against are built as soon as the
  // apiserver is ready (openapi_warm.ts): a List, which kubectl validates
  // against the whole v2 document, is applied without waiting for it.
  const warmed = "the apiserver's OpenAPI documents are built (kubectl apply validates against them)";
  await node.waitForLog((l) => l.msg === warmed, { what: "the OpenAPI documents built" });
  const list = join(dir.path, "list.json");
  writeFileSync(list, JSON.stringify({ apiVersion: "v1", kind: "List", items: [{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "from-a-list", namespace: "default" }, data: { a: "1" } }] }));
  expect(kubectl(kubeconfig, "apply", "-f", list)).toContain("configmap/from-a-list created");
  // The Metrics API: its APIService trusts the Kubernetes CA, and the
  // controller's metrics-server answers it over TLS, authenticating the
  // owner's certificate and asking the apiserver whether the owner may
  // (its delegated checks, with its own identity's bindings). The
  // apiserver's own route to it is its EndpointSlice, which a process
  // cluster's loopback addresses cannot be in (metrics_server.ts): VMs
  // prove `kubectl top` (test/e2e).
  await node.waitForLog((l) => l.msg === "Metrics API objects changed", { what: "the Metrics API's objects made" });
  const apiService = JSON.parse(kubectl(kubeconfig, "get", "apiservice", "v1beta1.metrics.k8s.io", "-o", "json")) as { spec: Record<string, unknown> };
  expect(apiService.spec).toMatchObject({ group: "metrics.k8s.io", version: "v1beta1", service: { name: "metrics-server", namespace: "kube-system", port: 443 } });
  expect(apiService.spec.insecureSkipTLSVerify).toBeFalsy();
  expect(typeof apiService.spec.caBundle).toBe("string");
  expect(canI("get", "nodes.metrics.k8s.io", "--as", "someone", "--as-group", "system:authenticated")).toBe("no");
  expect(canI("get", "nodes/metrics", "--as", "nodecore:metrics-server")).toBe("yes");
  const direct = JSON.parse(kubectl(kubeconfig, "--server", `https://${node.address}:4443`, "get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes")) as { kind: string; items: unknown[] };
  expect(direct).toMatchObject({ kind: "NodeMetricsList", items: [] });
  // It started once: its access was made before it (service_controller.ts).
  expect((await services(id)).get("metrics-server")).toMatchObject({ state: "running", message: "" });

  // The controller-manager works: it made the default namespace's service account.
  await eventually(() => expect(kubectl(kubeconfig, "get", "serviceaccount", "default", "-o", "name")).toBe("serviceaccount/default\n"), {
    timeoutMs: 60_000,
    intervalMs: 1000,
    what: "the default service account",
  });
  // Every controller's account is there, made ahead of the controller-manager
  // (controller_accounts.ts); route-controller's proves it: that controller
  // is the cloud provider's, which runs nowhere here, so only the reconciler made it.
  const accounts = kubectl(kubeconfig, "get", "serviceaccounts", "-n", "kube-system", "-o", "name").split("\n");
  for (const name of ["route-controller", "deployment-controller", "service-account-controller", "generic-garbage-collector"]) expect(accounts).toContain(`serviceaccount/${name}`);
  // The scheduler holds its lease.
  await eventually(() => expect(kubectl(kubeconfig, "get", "lease", "-n", "kube-system", "kube-scheduler", "-o", "name")).toBe("lease.coordination.k8s.io/kube-scheduler\n"), {
    timeoutMs: 60_000,
    intervalMs: 1000,
    what: "the scheduler's lease",
  });

  // The apiserver dies: the supervisor starts it again, the status says so,
  // and kubectl works again without help.
  const pid = Number(started("kube-apiserver")!.pid);
  process.kill(pid, "SIGKILL");
  await eventually(
    async () => {
      const line = (await services(id)).get("kube-apiserver");
      expect(line?.state).toBe("running");
      expect(line?.message).toBe("after 2 starts");
    },
    { timeoutMs: 120_000, intervalMs: 500, what: "the apiserver running again after its second start" },
  );
  expect(kubectl(kubeconfig, "get", "--raw", "/readyz")).toBe("ok");
  // The new apiserver process built its documents again.
  await eventually(() => expect(node.logs.filter((l) => l.msg === warmed).length).toBe(2), { timeoutMs: 120_000, intervalMs: 500, what: "the OpenAPI documents built again" });

  // The role goes: all three are stopped, and their lines with them.
  expect((await ctl("node", "roles", "unset", id, "kubernetes-controller")).code).toBe(0);
  await eventually(
    async () => {
      const lines = await services(id);
      for (const name of COMPONENTS) expect(lines.has(name)).toBe(false);
      expect(lines.get("kubernetes")?.state).toBe("not-assigned");
    },
    { timeoutMs: 60_000, what: "the components stopped and off the status" },
  );
  for (const name of COMPONENTS) {
    const spawned = Number(node.logs.findLast((l) => l.msg === "process started" && String(l.command).endsWith(`/${name}`))!.pid);
    expect(() => process.kill(spawned, 0)).toThrow();
  }

  // The role comes back: the same PKI is read from etcd, not made again, and
  // the owner's kubeconfig from before still works.
  const from = node.logs.length;
  expect((await ctl("node", "roles", "set", id, "kubernetes-controller")).code).toBe(0);
  await node.waitForLog((l) => l.msg === "read the Kubernetes PKI from etcd", { from, what: "the PKI read again" });
  await allRunning();
  expect(kubectl(kubeconfig, "get", "serviceaccount", "default", "-o", "name")).toBe("serviceaccount/default\n");
}, 480_000);

test("the volumes controller: a volume on a node the records no longer hold has its PV deleted, its claim Lost and told why; room published for a node that is not a worker is withdrawn; a volume on a node that is there is kept", async () => {
  // The node and its owner's kubeconfig from the test above (the controller runs on node1).
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  const apply = (object: unknown) => {
    const file = join(dir.path, "object.json");
    writeFileSync(file, JSON.stringify(object));
    kubectl(kubeconfig, "apply", "-f", file);
  };
  const self = (JSON.parse((await ctl("node", "list", "--json")).stdout) as { id: string }[])[0]!.id;
  const volume = (name: string, node: string, claim?: { name: string; uid: string }) => ({
    apiVersion: "v1",
    kind: "PersistentVolume",
    metadata: { name },
    spec: {
      capacity: { storage: "64Mi" },
      accessModes: ["ReadWriteOnce"],
      persistentVolumeReclaimPolicy: "Delete",
      storageClassName: "local",
      csi: { driver: "volumes.nodecore.local", volumeHandle: name },
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: "kubernetes.io/hostname", operator: "In", values: [node] }] }] } },
      ...(claim ? { claimRef: { apiVersion: "v1", kind: "PersistentVolumeClaim", namespace: "default", ...claim } } : {}),
    },
  });
  // A claim bound to a volume on node-gone, a node no record holds (as after
  // ctl node reset): written bound, both sides, as the PV controller leaves
  // them once it has bound a pair (the controller here may take longer to
  // bind than the volumes controller takes to see that node-gone is gone).
  apply({
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: { name: "kept-data", namespace: "default", annotations: { "pv.kubernetes.io/bind-completed": "yes" } },
    spec: { storageClassName: "local", accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "64Mi" } }, volumeName: "pvc-on-gone" },
  });
  const uid = kubectl(kubeconfig, "get", "pvc", "kept-data", "-o", "jsonpath={.metadata.uid}");
  apply(volume("pvc-on-gone", "node-gone", { name: "kept-data", uid }));
  kubectl(
    kubeconfig,
    "patch",
    "pvc",
    "kept-data",
    "--subresource=status",
    "--type=merge",
    "-p",
    JSON.stringify({ status: { phase: "Bound", capacity: { storage: "64Mi" }, accessModes: ["ReadWriteOnce"] } }),
  );
  kubectl(kubeconfig, "patch", "pv", "pvc-on-gone", "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { phase: "Bound" } }));
  // A volume on node1, which is in the records (not a worker): kept.
  apply(volume("pvc-on-self", self));
  apply({
    apiVersion: "storage.k8s.io/v1",
    kind: "CSIStorageCapacity",
    metadata: { name: "nodecore-local-node-resting", namespace: "kube-system" },
    storageClassName: "local",
    nodeTopology: { matchLabels: { "kubernetes.io/hostname": "node-resting" } },
    capacity: "100Mi",
  });
  // What the volumes controller does itself.
  await eventually(
    () => {
      expect(kubectl(kubeconfig, "get", "pv", "-o", "name").split("\n")).not.toContain("persistentvolume/pvc-on-gone");
      expect(kubectl(kubeconfig, "get", "csistoragecapacities", "-n", "kube-system", "-o", "name")).not.toContain("nodecore-local-node-resting");
    },
    // A change in Kubernetes alone is seen at the reconciler's resync (20 s), a gone node taken as gone at the look after (reconcile_pace.ts).
    { timeoutMs: 90_000, intervalMs: 1000, what: "the gone node's PV deleted, the stale room withdrawn" },
  );
  // What the controller-manager's PV controller does then: the claim Lost.
  // It may have to take its lease again first (the test above killed the
  // apiserver: up to the 120 s lease, LEADER_ELECTION_FLAGS), then sync the
  // claim; in the loaded unit suite that took more than a minute once.
  await eventually(() => expect(kubectl(kubeconfig, "get", "pvc", "kept-data", "-o", "jsonpath={.status.phase}")).toBe("Lost"), {
    timeoutMs: 240_000,
    intervalMs: 1000,
    what: "the gone node's claim Lost (the PV controller)",
  });
  const events = kubectl(kubeconfig, "get", "events", "-n", "default", "--field-selector", "involvedObject.name=kept-data", "-o", "jsonpath={range .items[*]}{.reason}: {.message}{'\\n'}{end}");
  expect(events).toContain("VolumeNodeGone: volume pvc-on-gone was on node node-gone, which is no longer in the cluster (reset or deleted)");
  expect(kubectl(kubeconfig, "get", "pv", "pvc-on-self", "-o", "name")).toBe("persistentvolume/pvc-on-self\n");
  // Said once the sweep is done, a few API calls after the deletion seen above.
  await node.waitForLog((l) => l.msg?.toString().startsWith("volumes of nodes that are gone") === true && l.volumes === "pvc-on-gone", { what: "the sweep's line naming pvc-on-gone" });
}, 420_000);

/** The built kubectl without blocking this process (the stand-in kubelet's loop runs beside ctl). */
async function kubectlAsync(kubeconfig: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = Bun.spawn([KUBECTL, "--kubeconfig", kubeconfig, "--request-timeout=30s", ...args], { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

test("the doorbell on collections (watch_doorbell.ts), against the real apiserver: quiet while nothing changes, rung by a change after the list's version (made before the watch, or while it waits), failed where there is no watch", async () => {
  // The owner's kubeconfig from the first test; its identity, as a client of ours would hold one.
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  const parsed = parseKubeconfig(readFileSync(kubeconfig, "utf8"));
  const identity = { ca: new X509Certificate(parsed.ca), certificate: new X509Certificate(parsed.certificate), privateKey: createPrivateKey(parsed.privateKey) };
  const signal = AbortSignal.timeout(120_000);
  // The list's own version, as the provisioner's lists carry it (`kubectl get -o json` makes a List of its own, without one).
  const version = (path: string) => (JSON.parse(kubectl(kubeconfig, "get", "--raw", path)) as { metadata: { resourceVersion: string } }).metadata.resourceVersion;
  const configMaps = "/api/v1/namespaces/default/configmaps";
  const volumes = { path: "/api/v1/persistentvolumes", resourceVersion: version("/api/v1/persistentvolumes") };

  let from = version(configMaps);
  let asked = performance.now();
  expect(await nextChange(parsed.server, identity, [{ path: configMaps, resourceVersion: from }, volumes], 2_000, signal)).toBe("quiet");
  expect(performance.now() - asked).toBeGreaterThanOrEqual(1_500);

  // A change between the list and the watch is not missed: the watch starts at the list's version.
  kubectl(kubeconfig, "create", "configmap", "doorbell-before", "-n", "default");
  asked = performance.now();
  expect(await nextChange(parsed.server, identity, [volumes, { path: configMaps, resourceVersion: from }], 30_000, signal)).toBe("changed");
  expect(performance.now() - asked).toBeLessThan(10_000);

  from = version(configMaps);
  const waiting = nextChange(parsed.server, identity, [{ path: configMaps, resourceVersion: from }, volumes], 30_000, signal);
  await Bun.sleep(1_000);
  asked = performance.now();
  kubectl(kubeconfig, "create", "configmap", "doorbell-while", "-n", "default");
  expect(await waiting).toBe("changed");
  expect(performance.now() - asked).toBeLessThan(10_000);

  // No such collection: the apiserver answers 404, and the caller goes back to its old pace.
  expect(await nextChange(parsed.server, identity, [{ path: "/api/v1/no-such-things", resourceVersion: from }], 5_000, signal)).toBe("failed");
  kubectl(kubeconfig, "delete", "configmap", "doorbell-before", "doorbell-while", "-n", "default");
}, 120_000);

test("ctl node drain: the worker's Node cordoned and its pods evicted through the Eviction API; a bare pod refused unless forced, with nothing changed; a PodDisruptionBudget kept until the drain's deadline, which names the pod and the budget's refusal; ctl node uncordon; a power-off's cordon taken back by the reconciler only once the Node turned Ready after it", async () => {
  // The node and its owner's kubeconfig from the first test (the controller
  // runs on node1). A node process runs no kubelet: the loop below stands in
  // for one, as the only part a drain needs from it: the Node's heartbeat,
  // its pods Ready, and an evicted pod's end once its grace would be over.
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  const id = (JSON.parse((await ctl("node", "list", "--json")).stdout) as { id: string }[])[0]!.id;
  const apply = (object: unknown) => {
    const file = join(dir.path, "drain-object.json");
    writeFileSync(file, JSON.stringify(object));
    kubectl(kubeconfig, "apply", "-f", file);
  };
  // A worker in the records, so that the reconciler keeps its Node (reconcileNodes).
  expect((await ctl("node", "roles", "set", id, "kubernetes-worker")).code).toBe(0);
  apply({ apiVersion: "v1", kind: "Node", metadata: { name: id, labels: { "kubernetes.io/hostname": id } } });
  const container = { name: "main", image: "nodecore.local/busybox:1", command: ["busybox", "sleep", "3600"] };
  const podSpec = { nodeName: id, automountServiceAccountToken: false, terminationGracePeriodSeconds: 5, containers: [container] };
  for (const name of ["solo", "web-a", "web-b"]) {
    apply({ apiVersion: "v1", kind: "Pod", metadata: { name, namespace: "default", labels: name === "solo" ? { app: "solo" } : { app: "web" } }, spec: podSpec });
  }
  // web-a and web-b are adopted by a ReplicaSet of two; a budget keeps one of them.
  apply({
    apiVersion: "apps/v1",
    kind: "ReplicaSet",
    metadata: { name: "web", namespace: "default" },
    spec: { replicas: 2, selector: { matchLabels: { app: "web" } }, template: { metadata: { labels: { app: "web" } }, spec: { automountServiceAccountToken: false, containers: [container] } } },
  });
  apply({ apiVersion: "policy/v1", kind: "PodDisruptionBudget", metadata: { name: "web", namespace: "default" }, spec: { minAvailable: 1, selector: { matchLabels: { app: "web" } } } });

  let standIn = true;
  // When the stand-in's Ready began: moved on below to play a node back from a power-off.
  let since = new Date().toISOString();
  const kubelet = (async () => {
    while (standIn) {
      const now = new Date().toISOString();
      const ready = { type: "Ready", status: "True", reason: "KubeletReady", message: "the test's stand-in", lastHeartbeatTime: now, lastTransitionTime: since };
      await kubectlAsync(kubeconfig, "patch", "node", id, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status: { conditions: [ready] } }));
      const listed = await kubectlAsync(kubeconfig, "get", "pods", "-A", "--field-selector", `spec.nodeName=${id}`, "-o", "json");
      const pods =
        listed.code === 0
          ? ((JSON.parse(listed.stdout) as { items: { metadata: { name: string; namespace: string; deletionTimestamp?: string }; status?: { conditions?: { type: string; status: string }[] } }[] })
              .items ?? [])
          : [];
      for (const pod of pods) {
        const { name, namespace } = pod.metadata;
        if (pod.metadata.deletionTimestamp) await kubectlAsync(kubeconfig, "delete", "pod", name, "-n", namespace, "--grace-period=0", "--force");
        else if (!pod.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True")) {
          const status = { phase: "Running", conditions: [{ type: "Ready", status: "True", lastTransitionTime: now }] };
          await kubectlAsync(kubeconfig, "patch", "pod", name, "-n", namespace, "--subresource=status", "--type=merge", "-p", JSON.stringify({ status }));
        }
      }
      await Bun.sleep(1000);
    }
  })();
  const unschedulable = () => kubectl(kubeconfig, "get", "node", id, "-o", "jsonpath={.spec.unschedulable}");
  const podsHere = () => kubectl(kubeconfig, "get", "pods", "--field-selector", `spec.nodeName=${id}`, "-o", "jsonpath={.items[*].metadata.name}").split(" ").filter(Boolean).sort();
  try {
    await eventually(() => expect(kubectl(kubeconfig, "get", "pdb", "web", "-o", "jsonpath={.status.disruptionsAllowed}")).toBe("1"), {
      timeoutMs: 120_000,
      intervalMs: 1000,
      what: "the budget allowing one disruption (both pods adopted and Ready)",
    });

    // A bare pod: refused, and the Node is left as it was.
    const bare = await ctl("node", "drain", id);
    expect(bare.code).not.toBe(0);
    expect(bare.stderr.trim()).toBe(`ctl: not draining ${id}: no controller would make default/solo again (bare pod); delete it, or pass --force to evict it for good; nothing was changed`);
    expect(unschedulable()).toBe("");
    expect(podsHere()).toEqual(["solo", "web-a", "web-b"]);

    // Forced: solo and one of the web pods go; the budget keeps the other until the deadline.
    const kept = await ctl("node", "drain", id, "--force", "--drain-timeout", "20");
    expect(kept.code).not.toBe(0);
    expect(kept.stderr).toMatch(
      new RegExp(
        `ctl: drain of ${id} stopped after [\\d.]+ s: default/web-[ab] could not be evicted \\(Cannot evict pod as it would violate the pod's disruption budget\\.[^)]*\\); ${id} stays cordoned`,
      ),
    );
    expect(unschedulable()).toBe("true");
    await eventually(() => expect(podsHere()).toHaveLength(1), { timeoutMs: 30_000, intervalMs: 1000, what: "solo and one web pod gone" });
    expect(podsHere()[0]).toMatch(/^web-[ab]$/);

    // The budget removed: the drain completes.
    kubectl(kubeconfig, "delete", "pdb", "web");
    const done = await ctl("node", "drain", id, "--drain-timeout", "60");
    expect(done.stderr).not.toContain("could not");
    expect(done.code).toBe(0);
    expect(done.stdout).toMatch(new RegExp(`^${id} drained in [\\d.]+ s and cordoned: 1 evicted\\n$`));
    expect(podsHere()).toEqual([]);

    const back = await ctl("node", "uncordon", id);
    expect(back.code).toBe(0);
    expect(back.stdout).toBe(`${id} is schedulable again\n`);
    expect(unschedulable()).toBe("");

    // A power-off's cordon, as ctl node poweroff leaves it (a node process
    // cannot be powered off and on: the mark and the cordon are set here).
    // While the Node has been Ready since before the mark, the controller's
    // reconciler leaves it cordoned; once its Ready turned True after the
    // mark (the node is back), the reconciler uncordons it and removes the mark.
    const mark = cordonMark(POWEROFF_COMMAND);
    kubectl(kubeconfig, "annotate", "node", id, `${CORDONED_BY_ANNOTATION}=${mark}`);
    kubectl(kubeconfig, "cordon", id);
    await Bun.sleep(RECONCILE_RESYNC_MS + RECONCILE_TICK_MS);
    expect(unschedulable()).toBe("true");
    since = new Date(Date.now() + 1_000).toISOString();
    await eventually(() => expect(unschedulable()).toBe(""), { timeoutMs: 3 * RECONCILE_RESYNC_MS, intervalMs: 1000, what: "the power-off's cordon taken back by the reconciler" });
    expect(kubectl(kubeconfig, "get", "node", id, "-o", `jsonpath={.metadata.annotations.${CORDONED_BY_ANNOTATION.replaceAll(".", "\\.")}}`)).toBe("");
  } finally {
    standIn = false;
    await kubelet;
  }
}, 360_000);

test("add-on manifests: ctl cluster manifests apply of a folder stores one per file; the controller applies them with server-side apply; one that is refused is named in the status ConfigMap, a Warning event and ctl cluster health, and blocks no other; a changed one is applied again; deleted, it is forgotten and its objects stay", async () => {
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  const folder = join(dir.path, "addons");
  mkdirSync(folder, { recursive: true });
  writeFileSync(
    join(folder, "good.yaml"),
    "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: addons}\ndata: {level: one}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: addons}\n",
  );
  writeFileSync(join(folder, "bad.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: orphan, namespace: missing-ns}\ndata: {a: b}\n");
  const applied = await ctl("cluster", "manifests", "apply", folder);
  expect(applied.stderr).toBe("");
  expect(applied.stdout).toContain("bad (1 object, from");
  expect(applied.stdout).toContain("good (2 objects, from");
  const listed = await ctl("cluster", "manifests", "list");
  expect(listed.stdout).toMatch(/^NAME\s+OBJECTS\s+SIZE\s+SHA256\s+STORED$/m);
  expect(listed.stdout).toMatch(/^good\s+ConfigMap addons\/settings, Namespace addons\s/m);

  // The Namespace is applied before the ConfigMap in it, though the file names it second.
  await eventually(() => expect(kubectl(kubeconfig, "get", "configmap", "settings", "-n", "addons", "-o", "jsonpath={.data.level}")).toBe("one"), {
    timeoutMs: 60_000,
    intervalMs: 1_000,
    what: "the good manifest's objects in Kubernetes",
  });
  expect(kubectl(kubeconfig, "get", "configmap", "settings", "-n", "addons", "-o", "jsonpath={.metadata.managedFields[0].manager}")).toBe("nodecore-manifests");
  const status = () => JSON.parse(kubectl(kubeconfig, "get", "configmap", "nodecore-manifests", "-n", "kube-system", "-o", "jsonpath={.data}")) as Record<string, string>;
  await eventually(
    () => {
      const bad = JSON.parse(status().bad ?? "{}") as { error?: string; applied?: number };
      expect(bad.error).toBe('ConfigMap missing-ns/orphan: namespaces "missing-ns" not found');
      expect(bad.applied).toBe(0);
      expect(JSON.parse(status().good!)).toMatchObject({ applied: 2, objects: 2 });
    },
    { timeoutMs: 60_000, intervalMs: 1_000, what: "both outcomes in the status ConfigMap" },
  );
  const events = kubectl(kubeconfig, "get", "events", "-n", "kube-system", "--field-selector", "reason=ManifestFailed", "-o", "jsonpath={.items[*].message}");
  expect(events).toContain('manifest bad: 0 of 1 objects applied; ConfigMap missing-ns/orphan: namespaces "missing-ns" not found');
  const health = await ctl("cluster", "health");
  expect(health.stdout).toMatch(/^manifests\s+FAIL\s+bad: 0 of 1 objects applied; ConfigMap missing-ns\/orphan: namespaces "missing-ns" not found$/m);

  // Changed: applied again (the field manager's own change wins over nobody's).
  writeFileSync(
    join(folder, "good.yaml"),
    "apiVersion: v1\nkind: Namespace\nmetadata: {name: addons}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings, namespace: addons}\ndata: {level: two}\n",
  );
  expect((await ctl("cluster", "manifests", "apply", join(folder, "good.yaml"))).code).toBe(0);
  await eventually(() => expect(kubectl(kubeconfig, "get", "configmap", "settings", "-n", "addons", "-o", "jsonpath={.data.level}")).toBe("two"), {
    timeoutMs: 60_000,
    intervalMs: 1_000,
    what: "the changed manifest applied",
  });
  // Deleted: forgotten, its status goes, its objects stay; the check passes again.
  const deleted = await ctl("cluster", "manifests", "delete", "bad");
  expect(deleted.stdout).toBe("bad: forgotten; its objects stay in Kubernetes (kubectl delete removes them)\n");
  await eventually(
    async () => {
      expect(status().bad).toBeUndefined();
      expect((await ctl("cluster", "health")).stdout).toMatch(/^manifests\s+ok\s+1 stored, every one applied$/m);
    },
    { timeoutMs: 60_000, intervalMs: 1_000, what: "the deleted manifest's status gone and the check passing" },
  );
  // Bad input costs no call and says why, in one line.
  writeFileSync(join(folder, "broken.json"), "{ not json");
  const refused = await ctl("cluster", "manifests", "apply", join(folder, "broken.json"));
  expect(refused.code).not.toBe(0);
  expect(refused.stderr.trim().split("\n")).toHaveLength(1);
  expect(refused.stderr).toContain("broken.json: not YAML or JSON: ");
  expect(kubectl(kubeconfig, "get", "configmap", "settings", "-n", "addons", "-o", "jsonpath={.data.level}")).toBe("two");
}, 300_000);
