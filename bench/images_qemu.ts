// Getting a user's image onto a worker in qemu (issue 47): two VMs formed
// as the launcher forms them (node1 the controller, node2 the worker), then
// for images of busybox and N MiB of random bytes (nothing compresses or
// dedupes; a new image each run):
//  - `ctl image import --node node2` of its bundle: ctl's wall time, and
//    where the node's time went, from its own log line (receiving, the
//    bundle's check, containerd's import);
//  - a pod on node2 naming it in the launcher's registry (TLS, a password):
//    `kubectl create` → Running, and the kubelet's own figure for the pull
//    from its "Successfully pulled" event.
// The host bench (bench/images.ts) measures the same paths without VMs.
// Fresh disks. Prints figures; asserts nothing. One cluster at a time.
//
//   bun bench/images_qemu.ts [--runs N] [--mib M] [--no-build] [--image-dir dir]

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { HOST_BUSYBOX, readBusybox } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { createCluster, CTL_BINARY, ensureBuilt, formCluster } from "../test/launch/mod.ts";
import { configureClusterRegistry } from "../test/launch/registry.ts";
import { sizeVms, thisHost } from "../test/launch/vm_sizing.ts";
import { ownerKubectl, podRunning } from "./owner_kubectl.ts";
import { randomImage } from "./random_image.ts";
import { figure, qemuAccel, seconds, spread } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf, wholeNumber } from "./args.ts";

const STEP_TIMEOUT_MS = 900_000;
const POLL_MS = 1_000;
/** The node's line at an import's end (internal/nodemgmt/images.ts), with its phases (images built before 2026-12-02 say none). */
const IMPORTED_LINE = /imported 1 image from an offline bundle [^\n]*?(?:receiveMs=(\d+) checkMs=(\d+) importMs=(\d+))?\s*$/m;
/** The kubelet's event for a pull: "Successfully pulled image "…" in 12.3s (12.3s including waiting)…". */
const PULLED_IN = /Successfully pulled image "[^"]+" in ([0-9.]+)(ms|s|m[0-9.]+s)/;

const { values } = benchArgs({
  runs: { type: "string", default: "3", help: "imports, and pulls, each of a new image" },
  mib: { type: "string", default: "32", help: "MiB of random bytes in each image, 1 to 256 (the VM's data partition holds every image three times over)" },
  ...IMAGE_FLAGS,
});
const runs = wholeNumber("--runs", values.runs);
const mib = wholeNumber("--mib", values.mib, 1, 256);
const imageDir = imageDirOf(values);
const log = createLogger("bench.images");

/** The kubelet's pull time in ms, from its event's "in 1m2.5s", "in 12.3s" or "in 850ms". */
function pulledMs(message: string): number | undefined {
  const match = PULLED_IN.exec(message);
  if (!match) return undefined;
  const [, value, unit] = match;
  if (unit === "ms") return Number(value);
  if (unit === "s") return Number(value) * 1000;
  return (Number(value) * 60 + Number(unit!.slice(1, -1))) * 1000;
}

if (!values["no-build"]) await ensureBuilt(log);
const cluster = await createCluster({ name: "benchimg", nodes: 2, quiet: true, imageDir, logger: log.child("launch") });
try {
  const launched = performance.now();
  const formed = await formCluster(cluster, { timeoutMs: STEP_TIMEOUT_MS, logger: log.child("formation") });
  const formation = performance.now() - launched;
  const { kubeconfig, kubectl } = ownerKubectl(cluster, "30s");
  const ctl = async (...args: string[]) => {
    const result = await formed.ctl(...args);
    if (result.exitCode !== 0) throw new Error(`ctl ${args.join(" ")}: ${result.stderr.trim()}`);
    return result.stdout;
  };
  const registry = cluster.registry;
  if (!registry) throw new Error("the launcher started no registry");
  // The registry first, as the launcher and an owner set it up: its CA and login for the workers.
  const configured = await configureClusterRegistry(registry, (args, stdin) => cluster.exec([CTL_BINARY, "--config", cluster.dir.ctlConfig, ...args], { stdin, okExitCodes: [0, 1, 2] }));
  if (configured.exitCode !== 0) throw new Error(`ctl cluster registry set: ${configured.stderr.trim()}`);
  const worker = formed.ids.get("node2")!;
  const roleSet = performance.now();
  await ctl("node", "roles", "set", worker, "kubernetes-worker");
  await eventually(
    async () => {
      await ctl("kubeconfig", kubeconfig);
      const ready = (await kubectl("get", "node", worker, "-o", 'jsonpath={.status.conditions[?(@.type=="Ready")].status}')).trim();
      if (ready !== "True") throw new Error(`Ready: ${ready || "no Node yet"}`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2's Node Ready" },
  );
  const nodeReady = performance.now() - roleSet;
  const consoleLog = join(cluster.dir.path, "node2.console.log");
  const modules = /kernel modules loaded count=(\d+)/.exec(readFileSync(consoleLog, "utf8"))?.[1];
  const leftOut = [...readFileSync(consoleLog, "utf8").matchAll(/CPU-specific module was left out.* module=(\S+)/g)].map((m) => m[1]);

  const imports = { wall: [] as number[], receive: [] as number[], check: [] as number[], import: [] as number[] };
  for (let i = 1; i <= runs; i++) {
    const file = join(cluster.dir.path, `import-${i}.oci.tar`);
    writeFileSync(file, randomImage(`bench.local/import-${i}:1`, mib * 1024 * 1024));
    const seen = readFileSync(consoleLog, "utf8").length;
    const started = performance.now();
    await ctl("image", "import", file, "--node", worker);
    imports.wall.push(performance.now() - started);
    const phases = await eventually(
      async () => {
        const match = IMPORTED_LINE.exec(readFileSync(consoleLog, "utf8").slice(seen));
        if (!match) throw new Error("no import line in node2's log yet");
        return match[1] === undefined ? undefined : (match.slice(1).map(Number) as [number, number, number]);
      },
      { timeoutMs: 30_000, intervalMs: 500, what: "node2's import line" },
    );
    if (phases) {
      imports.receive.push(phases[0]);
      imports.check.push(phases[1]);
      imports.import.push(phases[2]);
    }
    log.info(`import ${i}`, { seconds: (imports.wall.at(-1)! / 1000).toFixed(1), phases: phases ? `${phases.join(" / ")} ms` : "not in this image's log" });
  }

  // Pods need the namespace's default service account, which the controller-manager makes some time after the Node is Ready.
  await eventually(() => kubectl("get", "serviceaccount", "default"), { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the default service account" });
  const pulls = { running: [] as number[], kubelet: [] as number[] };
  for (let i = 1; i <= runs; i++) {
    const tarball = join(cluster.dir.path, `pull-${i}.oci.tar`);
    writeFileSync(tarball, randomImage(`bench.local/pull-${i}:1`, mib * 1024 * 1024));
    const image = await registry.push(tarball, `bench/pull-${i}:1`, (argv) => cluster.ns.run(argv));
    const name = `pull-${i}`;
    const file = join(cluster.dir.path, `${name}.json`);
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name },
        spec: { nodeName: worker, terminationGracePeriodSeconds: 1, containers: [{ name: "main", image, imagePullPolicy: "Always" }] },
      }),
    );
    const created = performance.now();
    await kubectl("create", "-f", file);
    await podRunning(kubectl, name, { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 500 });
    pulls.running.push(performance.now() - created);
    const events = await kubectl("get", "events", "--field-selector", `involvedObject.name=${name},reason=Pulled`, "-o", "jsonpath={.items[*].message}");
    const kubelet = pulledMs(events);
    if (kubelet !== undefined) pulls.kubelet.push(kubelet);
    log.info(`pull ${i}`, { seconds: (pulls.running.at(-1)! / 1000).toFixed(1), kubelet: events.trim().slice(0, 160) });
    await kubectl("delete", "pod", name, "--wait=false");
  }

  const size = `${(mib + readBusybox(HOST_BUSYBOX).length / 2 ** 20).toFixed(1)} MiB`;
  console.log(
    `\nimages in qemu (${await qemuAccel(imageDir)}, ${sizeVms(2, thisHost()).summary}, node2 the worker, fresh disks; ${modules ?? "?"} kernel modules on node2, left out: ${leftOut.join(", ") || "none"})`,
  );
  figure("two VMs → formed (both UP, node1 the controller)", seconds(formation));
  figure("kubernetes-worker set on node2 → its Node Ready", seconds(nodeReady));
  console.log(`min / median / max of ${runs}, an image of ${size} each`);
  figure("ctl image import --node node2, ctl's wall time", spread(imports.wall));
  figure("  the node: receiving", spread(imports.receive));
  figure("  the node: checking the bundle", spread(imports.check));
  figure("  the node: containerd's import", spread(imports.import));
  figure("a pod naming it in the registry: create → Running", spread(pulls.running));
  figure("  the kubelet's pull, from its event", pulls.kubelet.length ? spread(pulls.kubelet) : "not reported");
} finally {
  await cluster.close();
}
