// What etcd's CPU weight buys it on a busy CPU (issue 46), printed, never
// asserted. One real etcd, run by the node's process runner, its data on
// tmpfs so that the disk's fsync does not hide what the CPU scheduler does;
// 2 busy-looping processes per core in the root cgroup stand in for what
// shares a node's root cgroup with etcd (a kube-apiserver starting under
// TCG, its controllers, the kubelet). Sequential puts through the etcd3
// client, as the curator makes them: their latency with etcd in the root
// cgroup beside them, and in a cgroup of its own at ETCD_CPU_WEIGHT, as a
// VM's PID 1 places it (internal/sys/cgroup.ts).
//
// Where the host has a cgroup v2 cpu controller, the node's own function
// places etcd. Where it has cgroup v1's (this development host), the bench
// makes the same group in v1's cpu hierarchy with the weight's cpu.shares
// (weight × 1024 / 100: the kernel's fair scheduler reads both as the same
// group weight), and says so in its heading.
//   bun bench/cpu_weight.ts [puts=300] [busy processes=2 per core]

import { Etcd3 } from "etcd3";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, hostname } from "node:os";
import { join } from "node:path";
import { captureLogger } from "../internal/log/mod.ts";
import { processRunnable, supervise, untilCancelled } from "../internal/supervisor/mod.ts";
import { ETCD_CPU_WEIGHT, placeWithCpuWeight, unifiedCgroupRoot } from "../internal/sys/mod.ts";
import { eventually, freePorts, treeEtcd } from "../internal/testing/mod.ts";
import { figure, ms, percentile } from "./figures.ts";

const PUTS = Number(process.argv[2] ?? 300);
const HOGS = Number(process.argv[3] ?? 2 * cpus().length);
const GROUP = "nodecore-bench-etcd";

/** How this host places a process in a weighted group, and how that group is removed again; undefined if it cannot. */
function placer(): { how: string; place: (pid: number) => void; remove: () => void } | undefined {
  const v2 = unifiedCgroupRoot();
  if (v2 && readFileSync(join(v2, "cgroup.controllers"), "utf8").split(/\s+/).includes("cpu")) {
    return {
      how: `cgroup v2 at ${v2}: cpu.weight ${ETCD_CPU_WEIGHT} (the node's own placeWithCpuWeight)`,
      place: (pid) => placeWithCpuWeight(v2, GROUP, pid, ETCD_CPU_WEIGHT),
      remove: () => rmdirSync(join(v2, GROUP)),
    };
  }
  const v1 = "/sys/fs/cgroup/cpu";
  if (existsSync(join(v1, "cpu.shares")) && readFileSync("/proc/self/cgroup", "utf8").includes(":cpu:/\n")) {
    const shares = Math.round((ETCD_CPU_WEIGHT * 1024) / 100);
    return {
      how: `cgroup v1 at ${v1}: cpu.shares ${shares}, the same group weight as cpu.weight ${ETCD_CPU_WEIGHT} (this host has no v2 cpu controller)`,
      place: (pid) => {
        mkdirSync(join(v1, GROUP), { recursive: true });
        writeFileSync(join(v1, GROUP, "cpu.shares"), `${shares}\n`);
        writeFileSync(join(v1, GROUP, "cgroup.procs"), `${pid}\n`);
      },
      remove: () => rmdirSync(join(v1, GROUP)),
    };
  }
  return undefined;
}

async function measure(place: ((pid: number) => void) | undefined, hogs: number): Promise<number[]> {
  const dir = { path: mkdtempSync("/dev/shm/nodecore-bench-weight-") };
  const [client, peer] = freePorts(2);
  const url = `http://127.0.0.1:${client}`;
  const args = ["--data-dir", join(dir.path, "etcd"), "--listen-client-urls", url, "--advertise-client-urls", url, "--listen-peer-urls", `http://127.0.0.1:${peer}`, "--log-level", "error"];
  const { logger } = captureLogger("bench");
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("etcd", processRunnable({ command: treeEtcd(), args, ...(place ? { onSpawn: place } : {}) }));
      await untilCancelled(ctx.signal);
    },
    { logger },
  );
  const etcd = new Etcd3({ hosts: url });
  const busy = Array.from({ length: hogs }, () => Bun.spawn([process.execPath, "-e", "for (;;) {}"], { stdout: "ignore", stderr: "ignore" }));
  try {
    await eventually(() => etcd.put("/bench/warm").value("x"), { timeoutMs: 30_000 });
    await Bun.sleep(1_000);
    const samples: number[] = [];
    for (let i = 0; i < PUTS; i++) {
      const started = performance.now();
      await etcd.put(`/bench/${i}`).value("v");
      samples.push(performance.now() - started);
    }
    return samples;
  } finally {
    for (const hog of busy) hog.kill("SIGKILL");
    etcd.close();
    await supervisor.stop();
    rmSync(dir.path, { recursive: true, force: true });
  }
}

const group = placer();
console.log(`etcd put latency, ${PUTS} sequential puts; ${hostname()}, ${cpus().length} cores (${cpus()[0]?.model ?? "?"}), data on tmpfs`);
console.log(group ? `etcd's group: ${group.how}` : "etcd's group: none (no cpu controller this process may use): only the root-cgroup figures");
const row = (name: string, samples: number[]) => figure(name, `p50 ${ms(percentile(samples, 50))} · p99 ${ms(percentile(samples, 99))} · max ${ms(Math.max(...samples))}`);
row("no load, etcd in the root cgroup", await measure(undefined, 0));
row(`${HOGS} busy processes, etcd beside them in the root cgroup`, await measure(undefined, HOGS));
if (group) {
  try {
    row(`${HOGS} busy processes, etcd in its group at weight ${ETCD_CPU_WEIGHT}`, await measure(group.place, HOGS));
  } finally {
    group.remove();
  }
}
