// Role-change reaction of the Kubernetes roles, process mode: one node
// process on loopback with the system tree's binaries (out/system, built
// from their Go modules). Each trial measures, from the owner's ctl being
// started (ctl's own start-up and call included) to the node's own log line
// (its timestamps; same host, same clock):
//  - kubernetes-worker set → containerd answers, → the probe container runs
//    (a node process runs no kubelet: the qemu e2e has the kubelet's figures);
//  - kubernetes-worker unset → the runtime's cgroup is empty again;
//  - kubernetes-controller set → the real apiserver's /readyz answers,
//    → the controller-manager and scheduler are healthy.
// Prints min / median / max; asserts nothing.
//   bun bench/kubernetes_roles.ts [trials=3]

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { killCgroup, runtimeCgroupName, unifiedCgroupRoot } from "../internal/containerd/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode, type LogLine } from "../test/support/node_process.ts";
import { figure, percentile, seconds } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const TRIALS = wholeNumber("trials", benchArgs({}, { name: "trials", default: "3", help: "role changes of each kind" }).positional);
const WIDTH = 70;
const STEP_TIMEOUT_MS = 120_000;
const IDLE_MS = 30_000;

/** A process's resident memory in MiB, from /proc; undefined if it is gone. */
function rssMiB(pid: number): number | undefined {
  try {
    const kib = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"))?.[1];
    return kib === undefined ? undefined : Number(kib) / 1024;
  } catch {
    return undefined;
  }
}

const dir = tempDir("nodecore-bench-kube-");
const node = new NodeProcess("node1", join(dir.path, "node1"), loopbackBlock()(41));
const owned = ownedNode(node, dir.path);
const ctl = async (...args: string[]) => {
  const result = await owned.ctl(...args);
  if (result.code !== 0) throw new Error(`ctl ${args.join(" ")}: ${result.stderr}`);
  return result;
};
const cgroup = join(unifiedCgroupRoot() ?? "/sys/fs/cgroup", runtimeCgroupName(node.root));

/** The wall-clock time of the first log line after `from` that matches, in ms since the epoch. */
async function logged(from: number, match: (l: LogLine) => boolean, what: string): Promise<number> {
  const line = await node.waitForLog(match, { from, timeoutMs: STEP_TIMEOUT_MS, what });
  return Date.parse(line.time);
}

const samples = new Map<string, number[]>();
const add = (name: string, value: number) => samples.set(name, [...(samples.get(name) ?? []), value]);

try {
  const id = String((await owned.bootstrap({ timeoutMs: STEP_TIMEOUT_MS })).node);
  await node.waitForLog((l) => l.msg === "kube-scheduler is ready", { what: "the first controller ready", timeoutMs: STEP_TIMEOUT_MS });

  for (let trial = 1; trial <= TRIALS; trial++) {
    let from = node.logs.length;
    let t0 = Date.now();
    await ctl("node", "roles", "set", id, "kubernetes-worker");
    add("worker set → containerd answers", (await logged(from, (l) => l.msg === "containerd answers", "containerd answers")) - t0);
    add("worker set → the probe container runs", (await logged(from, (l) => /^runtime probe: pid /.test(l.msg), "the probe's report")) - t0);

    from = node.logs.length;
    t0 = Date.now();
    await ctl("node", "roles", "unset", id, "kubernetes-worker");
    add("worker unset → the runtime's cgroup is empty", (await logged(from, (l) => l.msg === "stopped what the container runtime left running", "the runtime stopped")) - t0);

    await ctl("node", "roles", "unset", id, "kubernetes-controller");
    await eventually(
      async () => {
        const nodes = JSON.parse((await ctl("node", "list", "--json")).stdout) as { id: string; services: { name: string }[] }[];
        if (nodes.find((n) => n.id === id)?.services.some((s) => s.name === "kube-apiserver")) throw new Error("the controller still runs");
      },
      { timeoutMs: STEP_TIMEOUT_MS, what: "the controller stopped" },
    );
    from = node.logs.length;
    t0 = Date.now();
    await ctl("node", "roles", "set", id, "kubernetes-controller");
    add("controller set → the apiserver's /readyz answers", (await logged(from, (l) => l.msg === "kube-apiserver is ready", "the apiserver ready")) - t0);
    const cm = await logged(from, (l) => l.msg === "kube-controller-manager is ready", "the controller-manager ready");
    const scheduler = await logged(from, (l) => l.msg === "kube-scheduler is ready", "the scheduler ready");
    add("controller set → controller-manager and scheduler healthy", Math.max(cm, scheduler) - t0);
    console.log(`  trial ${trial} done`);
  }
  console.log(`\nKubernetes role reaction, one node process on loopback (${TRIALS} trials; min / median / max)`);
  for (const [name, values] of samples) {
    figure(name, `${seconds(Math.min(...values), 2)} / ${seconds(percentile(values, 50), 2)} / ${seconds(Math.max(...values), 2)}`, WIDTH);
  }

  // Resident memory once idle: the controller's components, and containerd
  // with the probe (the worker role as a node process runs; a kubelet's is
  // in a VM only). Read from /proc after IDLE_MS with nothing asked of them.
  await ctl("node", "roles", "set", id, "kubernetes-worker");
  await node.waitForLog((l) => /^runtime probe: pid /.test(l.msg), { from: node.logs.length - 1, timeoutMs: STEP_TIMEOUT_MS, what: "the probe running" }).catch(() => {});
  await Bun.sleep(IDLE_MS);
  console.log(`\nResident memory after ${IDLE_MS / 1000} s idle (VmRSS, one node process)`);
  for (const name of ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "containerd"]) {
    const started = node.logs.findLast((l) => l.msg === "process started" && String(l.command).endsWith(`/${name}`));
    const rss = started ? rssMiB(Number(started.pid)) : undefined;
    figure(name, rss === undefined ? "not running" : `${rss.toFixed(0)} MiB`, WIDTH);
  }
} finally {
  await node.stop();
  await killCgroup(cgroup);
  dir[Symbol.dispose]();
}
