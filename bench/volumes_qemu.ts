// Persistent volumes in qemu, as a user sees them (issue 44): two VMs
// formed as the launcher forms them (node1 the controller, node2 the
// worker), then, with the default StorageClass local:
//  - claim and pod applied together → the pod Running with its volume
//    mounted, for claims one after another (each a new volume: the
//    scheduler's pick, the provisioner, the PV, the kubelet's mount);
//  - sequential throughput in one pod, inside its volume (a directory with
//    a project quota) against an emptyDir beside it (the same encrypted
//    data partition, no quota): writes with an fsync at the end, reads with
//    O_DIRECT, so that neither is the page cache;
//  - the claim grown while the pod runs → the new size seen by `df` in
//    the pod.
// Fresh disks. Prints figures; asserts nothing. One cluster at a time.
//
//   bun bench/volumes_qemu.ts [--claims N] [--mib M] [--no-build] [--image-dir dir]

import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { sizeVms, thisHost } from "../test/launch/vm_sizing.ts";
import { TEST_IMAGE_REF } from "../internal/containerd/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { createCluster, ensureBuilt, formCluster } from "../test/launch/mod.ts";
import { ownerKubectl } from "./owner_kubectl.ts";
import { figure, percentile, qemuAccel, seconds } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf, wholeNumber } from "./args.ts";

const STEP_TIMEOUT_MS = 600_000;
const POLL_MS = 1_000;

const { values } = benchArgs({
  claims: { type: "string", default: "3", help: "claims made one after another" },
  mib: { type: "string", default: "128", help: "MiB written and read in each throughput test, 8 to 256 (the VM's data partition holds a volume and an emptyDir of that size)" },
  ...IMAGE_FLAGS,
});
const claims = wholeNumber("--claims", values.claims);
const mib = wholeNumber("--mib", values.mib, 8, 256);
const imageDir = imageDirOf(values);
const log = createLogger("bench.volumes");

if (!values["no-build"]) await ensureBuilt(log);
const cluster = await createCluster({ name: "benchvol", nodes: 2, quiet: true, imageDir, logger: log.child("launch") });
try {
  const formed = await formCluster(cluster, { timeoutMs: STEP_TIMEOUT_MS, logger: log.child("formation") });
  const { kubeconfig, kubectl } = ownerKubectl(cluster);
  const apply = async (name: string, ...objects: unknown[]) => {
    const file = join(cluster.dir.path, `${name}.json`);
    writeFileSync(file, JSON.stringify({ apiVersion: "v1", kind: "List", items: objects }));
    // create, not apply: client-side apply reads the apiserver's whole
    // OpenAPI v2 document to make its patch, which the apiserver builds on
    // the first request, for minutes under TCG (noted for issue 47); the
    // objects are new, and the apiserver validates them either way.
    await kubectl("create", "-f", file);
  };
  // Running and its container ready (an exec right after Running alone may find no container yet).
  const untilRunning = (pod: string) =>
    eventually(
      async () => {
        const state = (await kubectl("get", "pod", pod, "-o", "jsonpath={.status.phase} {.status.containerStatuses[0].ready}")).trim();
        if (state !== "Running true") throw new Error(`phase and readiness: ${state || "none yet"}`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 250, what: `${pod} Running` },
    );
  await eventually(
    async () => {
      const written = await formed.ctl("kubeconfig", kubeconfig);
      if (written.exitCode !== 0) throw new Error(written.stderr.trim());
      if ((await kubectl("get", "--raw", "/readyz")).trim() !== "ok") throw new Error("not ready");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the apiserver ready for the owner" },
  );
  const worker = formed.ids.get("node2")!;
  const set = await formed.ctl("node", "roles", "set", worker, "kubernetes-worker");
  if (set.exitCode !== 0) throw new Error(set.stderr.trim());
  // The worker publishes its room once its provisioner runs: claims are placed only then.
  await eventually(
    async () => {
      const room = await kubectl("get", "csistoragecapacities", "-n", "kube-system", "-o", "name");
      if (!room.includes(worker)) throw new Error("no CSIStorageCapacity from node2 yet");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2's room published" },
  );

  const claim = (name: string, storage: string) => ({
    apiVersion: "v1",
    kind: "PersistentVolumeClaim",
    metadata: { name },
    spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage } } },
  });
  const pod = (name: string, claimName: string, scratch = false) => ({
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name },
    spec: {
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: "main",
          image: TEST_IMAGE_REF,
          imagePullPolicy: "Never",
          command: ["sh", "-c", "exec sleep 3600"],
          volumeMounts: [{ name: "data", mountPath: "/data" }, ...(scratch ? [{ name: "scratch", mountPath: "/scratch" }] : [])],
        },
      ],
      volumes: [{ name: "data", persistentVolumeClaim: { claimName } }, ...(scratch ? [{ name: "scratch", emptyDir: {} }] : [])],
    },
  });

  // Claim → Running, one after another.
  const running: number[] = [];
  for (let i = 1; i <= claims; i++) {
    const applied = performance.now();
    await apply(`claim-${i}`, claim(`claim-${i}`, "16Mi"), pod(`user-${i}`, `claim-${i}`));
    await untilRunning(`user-${i}`);
    running.push(performance.now() - applied);
    log.info(`user-${i} Running on its volume`, { seconds: (running.at(-1)! / 1000).toFixed(1) });
  }

  // Throughput: one pod, its volume and an emptyDir on the same partition.
  const size = 2 * mib;
  await apply("throughput", claim("throughput", `${size}Mi`), pod("throughput", "throughput", true));
  await untilRunning("throughput");
  const exec = (script: string) => kubectl("exec", "throughput", "--", "sh", "-c", script);
  // Timed in the pod by the kernel's uptime (10 ms steps), so kubectl exec's round trip is not in it.
  const timed = async (script: string) => {
    const said = await exec(`a=$(cut -d' ' -f1 /proc/uptime); ${script} 2>/dev/null; b=$(cut -d' ' -f1 /proc/uptime); echo "took $a $b"`);
    const [, a, b] = /took ([0-9.]+) ([0-9.]+)/.exec(said) ?? [];
    if (a === undefined || b === undefined) throw new Error(`no timing in ${JSON.stringify(said.slice(0, 200))}`);
    return (Number(b) - Number(a)) * 1000;
  };
  const rate = (ms: number) => `${(mib / (ms / 1000)).toFixed(1)} MiB/s`;
  const pass = async (dir: string) => {
    const write = await timed(`dd if=/dev/zero of=${dir}/f bs=1M count=${mib} conv=fsync`);
    const read = await timed(`dd if=${dir}/f of=/dev/null bs=1M iflag=direct`);
    await exec(`rm -f ${dir}/f`);
    return { write, read };
  };
  const inside: { write: number; read: number }[] = [];
  const outside: { write: number; read: number }[] = [];
  for (let run = 0; run < 3; run++) {
    inside.push(await pass("/data"));
    outside.push(await pass("/scratch"));
  }
  const median = (list: number[]) => percentile(list, 50);
  const [wIn, rIn, wOut, rOut] = [median(inside.map((r) => r.write)), median(inside.map((r) => r.read)), median(outside.map((r) => r.write)), median(outside.map((r) => r.read))];

  // Expansion while running → df in the pod sees it.
  const grown = 2 * size;
  const dfMiB = async () => Number((await exec("df -k /data | tail -1")).trim().split(/\s+/)[1]) / 1024;
  const asked = performance.now();
  await kubectl("patch", "pvc", "throughput", "--type=merge", "-p", JSON.stringify({ spec: { resources: { requests: { storage: `${grown}Mi` } } } }));
  await eventually(
    async () => {
      const seen = await dfMiB();
      if (seen < grown) throw new Error(`df says ${seen} MiB`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 500, what: `df in the pod at ${grown} MiB` },
  );
  const expansion = performance.now() - asked;

  console.log(`\nPersistent volumes in qemu (${await qemuAccel(imageDir)}, ${sizeVms(2, thisHost()).summary}, node1 controller, node2 worker, fresh disks; timed in the pod)`);
  figure(`claim and pod applied → pod Running on its new volume, ${claims} one after another: p50 / max`, `${seconds(percentile(running, 50))} / ${seconds(Math.max(...running))}`);
  figure(`write ${mib} MiB + fsync, median of 3: in the volume / in an emptyDir (same partition)`, `${rate(wIn)} / ${rate(wOut)} (ratio ${(wOut / wIn).toFixed(2)})`);
  figure(`read ${mib} MiB O_DIRECT, median of 3: in the volume / in an emptyDir`, `${rate(rIn)} / ${rate(rOut)} (ratio ${(rOut / rIn).toFixed(2)})`);
  figure(`claim grown ${size} → ${grown} MiB while running → df in the pod sees it`, seconds(expansion));
} finally {
  await cluster.close();
}
