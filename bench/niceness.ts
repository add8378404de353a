// What a niceness buys etcd on a loaded CPU (issue 46), printed, never
// asserted. One real etcd, run by the node's process runner as the node
// runs it (internal/supervisor: `niceness` on every thread), its data on
// tmpfs so that the disk's fsync does not hide what the CPU scheduler does;
// 2 busy-looping processes per core at the node's own niceness (0) stand in
// for a node whose CPUs are taken (a kube-apiserver starting under TCG, or a
// user's pods). Sequential puts through the etcd3 client, as the curator
// makes them: their latency at niceness 0 and at ETCD_NICENESS (-10), and
// with no load for reference.
//   bun bench/niceness.ts [puts=300] [busy processes=2 per core]

import { Etcd3 } from "etcd3";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, hostname } from "node:os";
import { join } from "node:path";
import { ETCD_NICENESS } from "../internal/consensus/mod.ts";
import { captureLogger } from "../internal/log/mod.ts";
import { processRunnable, supervise, untilCancelled } from "../internal/supervisor/mod.ts";
import { eventually, freePorts, treeEtcd } from "../internal/testing/mod.ts";
import { figure, ms, percentile } from "./figures.ts";

const PUTS = Number(process.argv[2] ?? 300);
const HOGS = Number(process.argv[3] ?? 2 * cpus().length);

async function measure(niceness: number | undefined, hogs: number): Promise<number[]> {
  const dir = { path: mkdtempSync("/dev/shm/nodecore-bench-nice-") };
  const [client, peer] = freePorts(2);
  const url = `http://127.0.0.1:${client}`;
  const args = ["--data-dir", join(dir.path, "etcd"), "--listen-client-urls", url, "--advertise-client-urls", url, "--listen-peer-urls", `http://127.0.0.1:${peer}`, "--log-level", "error"];
  const { logger } = captureLogger("bench");
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("etcd", processRunnable({ command: treeEtcd(), args, ...(niceness !== undefined ? { niceness } : {}) }));
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

console.log(`etcd put latency, ${PUTS} sequential puts; ${hostname()}, ${cpus().length} cores (${cpus()[0]?.model ?? "?"}), data on tmpfs`);
const row = (name: string, samples: number[]) => figure(name, `p50 ${ms(percentile(samples, 50))} · p99 ${ms(percentile(samples, 99))} · max ${ms(Math.max(...samples))}`);
row("no load, etcd at niceness 0", await measure(undefined, 0));
row(`${HOGS} busy processes at 0, etcd at niceness 0`, await measure(undefined, HOGS));
row(`${HOGS} busy processes at 0, etcd at ETCD_NICENESS (${ETCD_NICENESS})`, await measure(ETCD_NICENESS, HOGS));
