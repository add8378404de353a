// The cluster network in qemu (issue 29): three VMs formed as the launcher
// forms them; node1 is the controller, node2 a worker; then
//  - kubernetes-worker set on node3 → a pod on node3 answers a pod on node2
//    by IP (the new node's key, prefix and routes reached node2's mesh);
//  - round trip pod → pod across the mesh (busybox ping, 20 packets), and
//    node → node on the same pair (host-network pods), in the same run;
//  - throughput pod → pod across the mesh against node → node on the same
//    pair, in the same run (32 MiB through busybox nc, timed inside the
//    sender by /proc/uptime), and their ratio;
//  - a Service's selector moved to another pod → its ClusterIP answers
//    with the new pod, seen from node2's pod.
// Fresh disks. Prints figures; asserts nothing. One cluster at a time.
//
//   bun bench/mesh_qemu.ts [--no-build] [--image-dir dir]

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { sizeVms, thisHost } from "../test/launch/vm_sizing.ts";
import { TEST_IMAGE_REF } from "../internal/containerd/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { createCluster, ensureBuilt, formCluster, httpBody, httpGetCommand } from "../test/launch/mod.ts";
import { ownerKubectl } from "./owner_kubectl.ts";
import { figure, qemuAccel, seconds } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf } from "./args.ts";

const STEP_TIMEOUT_MS = 900_000;
const POLL_MS = 1_000;
const PORT = 8080;
const STREAM_PORT = 9000;
const STREAM_MIB = 32;

const { values } = benchArgs({
  ...IMAGE_FLAGS,
});
const imageDir = imageDirOf(values);
const log = createLogger("bench.mesh");

/** A busybox pod on `node`, serving `page` over HTTP and a byte sink on STREAM_PORT; on the host's network if asked. */
function pod(name: string, node: string, page: string, labels: Record<string, string>, hostNetwork = false): unknown {
  const port = hostNetwork ? STREAM_PORT + 1 : STREAM_PORT;
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels },
    spec: {
      nodeName: node,
      hostNetwork,
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: "main",
          image: TEST_IMAGE_REF,
          imagePullPolicy: "Never",
          command: [
            "sh",
            "-c",
            // The byte sink: busybox's small nc quits when its own stdin ends,
            // so each connection goes to a program (-e) that only reads, and
            // -ll keeps listening.
            `busybox mkdir -p /www; echo ${page} > /www/index.html; printf '#!/bin/sh\\nexec busybox cat > /dev/null\\n' > /sink; busybox chmod +x /sink; ${hostNetwork ? "" : `busybox httpd -p ${PORT} -h /www; `}exec busybox nc -ll -p ${port} -e /sink`,
          ],
        },
      ],
    },
  };
}

if (!values["no-build"]) await ensureBuilt(log);
const cluster = await createCluster({ name: "benchmesh", nodes: 3, quiet: true, imageDir, logger: log.child("launch") });
try {
  const formed = await formCluster(cluster, { timeoutMs: STEP_TIMEOUT_MS, logger: log.child("formation") });
  const { kubeconfig, kubectl } = ownerKubectl(cluster);
  const apply = async (name: string, object: unknown) => {
    const file = join(cluster.dir.path, `${name}.json`);
    writeFileSync(file, JSON.stringify(object));
    await kubectl("apply", "-f", file);
  };
  const running = (name: string) =>
    eventually(
      async () => {
        const phase = (await kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")).trim();
        if (phase !== "Running") throw new Error(`${name}: ${phase || "no phase yet"}`);
        return (await kubectl("get", "pod", name, "-o", "jsonpath={.status.podIP}")).trim();
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: `${name} Running` },
    );
  const setWorker = async (node: string) => {
    const set = await formed.ctl("node", "roles", "set", formed.ids.get(node)!, "kubernetes-worker");
    if (set.exitCode !== 0) throw new Error(set.stderr.trim());
  };
  await eventually(
    async () => {
      const written = await formed.ctl("kubeconfig", kubeconfig);
      if (written.exitCode !== 0) throw new Error(written.stderr.trim());
      if ((await kubectl("get", "--raw", "/readyz")).trim() !== "ok") throw new Error("not ready");
      await kubectl("get", "serviceaccount", "default");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the apiserver ready, with the default service account" },
  );
  const [node2, node3] = ["node2", "node3"].map((n) => formed.ids.get(n)!);
  await setWorker("node2");
  await eventually(async () => (await kubectl("get", "node", node2!, "-o", "name")).trim() !== "", { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2's Node" });
  await apply("client", pod("client", node2!, "client", { app: "client" }));
  await running("client");
  const fetchIn = (host: string, port: number) =>
    kubectl("exec", "client", "--", "sh", "-c", httpGetCommand(host, port)).then((answer) => httpBody(answer, `http://${host}:${port}/ from the client pod`));

  // A node added: from the role set to its pod answering node2's. The pod
  // is applied once its Node exists: the pod garbage collector deletes pods
  // bound to a node that does not (after 40 s), as it does for an operator.
  const added = performance.now();
  await setWorker("node3");
  await eventually(async () => (await kubectl("get", "node", node3!, "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')).trim() === "True", {
    timeoutMs: STEP_TIMEOUT_MS,
    intervalMs: POLL_MS,
    what: "node3's Node Ready",
  });
  const nodeReady = performance.now() - added;
  await apply("v1", pod("v1", node3!, "v1", { app: "v1" }));
  const v1 = await running("v1");
  await eventually(async () => (await fetchIn(v1, PORT)) === "v1", { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 250, what: "node3's pod reachable from node2's" });
  const nodeAdded = performance.now() - added;

  // Round trips and throughput, the mesh against the nodes' own network on the same pair.
  await apply("host2", pod("host2", node2!, "host2", { app: "host2" }, true));
  await apply("host3", pod("host3", node3!, "host3", { app: "host3" }, true));
  await running("host2");
  await running("host3");
  const address3 = cluster.node("node3").address;
  const rtt = async (from: string, to: string) => {
    const out = await kubectl("exec", from, "--", "busybox", "ping", "-c", "20", "-i", "0.2", "-q", to);
    const avg = /= [\d.]+\/([\d.]+)\//.exec(out)?.[1];
    if (!avg) throw new Error(`no round trip in: ${out}`);
    return Number(avg);
  };
  const meshRtt = await rtt("client", v1);
  const nodeRtt = await rtt("host2", address3);
  const throughput = async (from: string, to: string, port: number) => {
    const script = `a=$(busybox cut -d' ' -f1 /proc/uptime); busybox dd if=/dev/zero bs=1048576 count=${STREAM_MIB} 2>/dev/null | busybox nc -w 5 ${to} ${port}; b=$(busybox cut -d' ' -f1 /proc/uptime); echo "$a $b"`;
    const [a, b] = (await kubectl("exec", from, "--", "sh", "-c", script)).trim().split(/\s+/).map(Number);
    return STREAM_MIB / (b! - a!);
  };
  const meshMiBs = await throughput("client", v1, STREAM_PORT);
  const nodeMiBs = await throughput("host2", address3, STREAM_PORT + 1);

  // A Service's endpoints changed: its selector moved from v1 to v2.
  await apply("v2", pod("v2", node3!, "v2", { app: "v2" }));
  await running("v2");
  const service = (app: string) => ({ apiVersion: "v1", kind: "Service", metadata: { name: "bench" }, spec: { selector: { app }, ports: [{ port: 80, targetPort: PORT }] } });
  await apply("service", service("v1"));
  const clusterIp = (await kubectl("get", "service", "bench", "-o", "jsonpath={.spec.clusterIP}")).trim();
  await eventually(async () => (await fetchIn(clusterIp, 80)) === "v1", { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 250, what: "the Service answering with v1" });
  const moved = performance.now();
  await apply("service", service("v2"));
  await eventually(async () => (await fetchIn(clusterIp, 80)) === "v2", { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 250, what: "the Service answering with v2" });
  const endpointChange = performance.now() - moved;

  console.log(`\nCluster network in qemu (${await qemuAccel(imageDir)}, ${sizeVms(3, thisHost()).summary}; node1 controller, node2 and node3 workers; fresh disks)`);
  figure("kubernetes-worker set on node3 → its Node Ready", seconds(nodeReady));
  figure("kubernetes-worker set on node3 → a pod on it answers node2's pod by IP", seconds(nodeAdded));
  figure("round trip, pod → pod across the mesh (avg of 20)", `${meshRtt.toFixed(1)} ms`);
  figure("round trip, node → node on the same pair (avg of 20)", `${nodeRtt.toFixed(1)} ms`);
  figure(`throughput, pod → pod across the mesh (${STREAM_MIB} MiB)`, `${meshMiBs.toFixed(1)} MiB/s`);
  figure(`throughput, node → node on the same pair (${STREAM_MIB} MiB)`, `${nodeMiBs.toFixed(1)} MiB/s`);
  figure("throughput ratio, mesh / nodes' own network", (meshMiBs / nodeMiBs).toFixed(2));
  figure("Service selector moved → its ClusterIP answers with the new pod", seconds(endpointChange));
} finally {
  await cluster.close();
}
