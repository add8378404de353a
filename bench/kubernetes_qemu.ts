// Kubernetes in qemu, as an owner sees it: two VMs formed as the launcher
// forms them (node1 bootstraps and is the controller; node2 registers), then
//  - node1's apiserver ready for the owner's kubectl, from node1 UP;
//  - kubernetes-worker set on node2 → its Node Ready;
//  - pods, one after another, each `kubectl apply` → Running (the preloaded
//    busybox image, imagePullPolicy Never, on node2);
//  - the apiserver's and the kubelet's resident memory once idle, from
//    their own metrics.
// Fresh disks. Prints figures (min / median / max, and p50 / max over the
// pods); asserts nothing. One cluster at a time: two VMs with two vCPUs
// each already share this machine's two cores.
//
//   bun bench/kubernetes_qemu.ts [--pods N] [--no-build] [--image-dir dir]

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { sizeVms, thisHost } from "../test/launch/vm_sizing.ts";
import { TEST_IMAGE_REF } from "../internal/containerd/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { createCluster, ensureBuilt, formCluster } from "../test/launch/mod.ts";
import { ownerKubectl, podRunning } from "./owner_kubectl.ts";
import { figure, percentile, qemuAccel, seconds } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf, wholeNumber } from "./args.ts";

const STEP_TIMEOUT_MS = 600_000;
const POLL_MS = 1_000;
const IDLE_MS = 30_000;

const { values } = benchArgs({
  pods: { type: "string", default: "5", help: "pods made one after another" },
  ...IMAGE_FLAGS,
});
const pods = wholeNumber("--pods", values.pods);
const imageDir = imageDirOf(values);
const log = createLogger("bench.kubernetes");

if (!values["no-build"]) await ensureBuilt(log);
const cluster = await createCluster({ name: "benchk8s", nodes: 2, quiet: true, imageDir, logger: log.child("launch") });
try {
  let node1Up = 0;
  const formed = await formCluster(cluster, {
    timeoutMs: STEP_TIMEOUT_MS,
    logger: log.child("formation"),
    onStage: (stage) => {
      if (stage === "node1 UP") node1Up = performance.now();
    },
  });
  const { kubeconfig, kubectl } = ownerKubectl(cluster, "20s");
  await eventually(
    async () => {
      const written = await formed.ctl("kubeconfig", kubeconfig);
      if (written.exitCode !== 0) throw new Error(written.stderr.trim());
      if ((await kubectl("get", "--raw", "/readyz")).trim() !== "ok") throw new Error("not ready");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the apiserver ready for the owner" },
  );
  const apiserverReady = performance.now() - node1Up;

  const worker = formed.ids.get("node2")!;
  const roleSet = performance.now();
  const set = await formed.ctl("node", "roles", "set", worker, "kubernetes-worker");
  if (set.exitCode !== 0) throw new Error(set.stderr.trim());
  await eventually(
    async () => {
      const ready = (await kubectl("get", "node", worker, "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')).trim();
      if (ready !== "True") throw new Error(`Ready: ${ready || "no Node yet"}`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2's Node Ready" },
  );
  const nodeReady = performance.now() - roleSet;

  const running: number[] = [];
  for (let i = 1; i <= pods; i++) {
    const name = `bench-${i}`;
    const file = join(cluster.dir.path, `${name}.json`);
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name },
        spec: { terminationGracePeriodSeconds: 1, containers: [{ name: "main", image: TEST_IMAGE_REF, imagePullPolicy: "Never", command: ["sh", "-c", "exec sleep 3600"] }] },
      }),
    );
    const applied = performance.now();
    await kubectl("apply", "-f", file);
    await podRunning(kubectl, name, { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 250 });
    running.push(performance.now() - applied);
    log.info(`${name} Running`, { seconds: (running.at(-1)! / 1000).toFixed(1) });
  }

  // Resident memory once idle, as the components report it themselves
  // (process_resident_memory_bytes), read as the owner: the apiserver's own
  // /metrics, and the kubelet's through the apiserver's node proxy.
  await Bun.sleep(IDLE_MS);
  const rss = async (path: string) => {
    const metrics = await kubectl("get", "--raw", path);
    const bytes = /^process_resident_memory_bytes ([0-9.e+]+)$/m.exec(metrics)?.[1];
    return bytes === undefined ? "not reported" : `${(Number(bytes) / 1024 / 1024).toFixed(0)} MiB`;
  };
  const apiserverRss = await rss("/metrics");
  const kubeletRss = await rss(`/api/v1/nodes/${worker}/proxy/metrics`);

  console.log(`\nKubernetes in qemu (${await qemuAccel(imageDir)}, ${sizeVms(2, thisHost()).summary}, node1 controller, node2 worker, fresh disks)`);
  figure("node1 UP → its apiserver ready for the owner's kubectl", seconds(apiserverReady));
  figure("kubernetes-worker set on node2 → its Node Ready", seconds(nodeReady));
  figure(`kubectl apply → pod Running, ${pods} pods one after another: p50 / max`, `${seconds(percentile(running, 50))} / ${seconds(Math.max(...running))}`);
  figure(`resident memory after ${IDLE_MS / 1000} s idle: kube-apiserver (node1)`, apiserverRss);
  figure(`resident memory after ${IDLE_MS / 1000} s idle: kubelet (node2, ${pods} pods)`, kubeletRss);
} finally {
  await cluster.close();
}
