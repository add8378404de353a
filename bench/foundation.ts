// Figures for the foundation: binary sizes, start-up time, memory, the
// supervisor's first-restart latency and watchable-value throughput.
// Prints figures; asserts nothing. Run with `bun run bench` (builds first if
// out/ is missing).

import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { Value } from "../internal/event/mod.ts";
import { captureLogger } from "../internal/log/mod.ts";
import { supervise, untilCancelled } from "../internal/supervisor/mod.ts";
import { tempDir } from "../internal/testing/mod.ts";
import { benchArgs } from "./args.ts";
import { ms } from "./figures.ts";

benchArgs({});

const ROOT = join(import.meta.dir, "..");
const INIT = join(ROOT, "out/init");
const CTL = join(ROOT, "out/ctl");
const STARTUP_RUNS = 20;
const RESTART_SAMPLES = 5;
const EVENT_COUNT = 1_000_000;

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

function figure(name: string, value: string): void {
  console.log(`${name.padEnd(56)} ${value}`);
}

async function binarySizes(): Promise<void> {
  figure("out/init size", `${(statSync(INIT).size / 1e6).toFixed(1)} MB`);
  figure("out/ctl size", `${(statSync(CTL).size / 1e6).toFixed(1)} MB`);
}

async function startup(): Promise<void> {
  const times: number[] = [];
  for (let i = 0; i < STARTUP_RUNS; i++) {
    const started = performance.now();
    const result = Bun.spawnSync([INIT, "--version"]);
    if (result.exitCode !== 0) throw new Error(`out/init --version failed: ${result.stderr}`);
    times.push(performance.now() - started);
  }
  figure(`out/init --version (median of ${STARTUP_RUNS})`, ms(median(times)));
}

async function rssAfterStart(): Promise<void> {
  using root = tempDir("nodecore-bench-");
  const child = Bun.spawn([INIT, "--root", root.path, "--address", "127.0.0.1"], { stdout: "ignore", stderr: "pipe", env: { ...process.env, NODECORE_LOG_FORMAT: "text" } });
  const reader = child.stderr.getReader();
  let seen = "";
  while (!seen.includes("node core started")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`out/init exited before starting: ${seen}`);
    seen += new TextDecoder().decode(value);
  }
  await Bun.sleep(500); // let start-up allocations settle before reading RSS
  const status = readFileSync(`/proc/${child.pid}/status`, "utf8");
  const rss = /VmRSS:\s+(\d+) kB/.exec(status)?.[1];
  child.kill("SIGTERM");
  await child.exited;
  figure("out/init RSS after start", `${(Number(rss) / 1024).toFixed(1)} MiB`);
}

async function firstRestartLatency(): Promise<void> {
  const samples: number[] = [];
  for (let i = 0; i < RESTART_SAMPLES; i++) {
    let diedAt = 0;
    let restartedAt = 0;
    const { logger } = captureLogger("bench");
    const supervisor = supervise(
      async (ctx) => {
        let starts = 0;
        ctx.run("crasher", async (c) => {
          starts++;
          if (starts === 1) {
            diedAt = performance.now();
            throw new Error("crash");
          }
          restartedAt = performance.now();
          await untilCancelled(c.signal);
        });
        await untilCancelled(ctx.signal);
      },
      { logger },
    );
    while (restartedAt === 0) await Bun.sleep(5);
    await supervisor.stop();
    samples.push(restartedAt - diedAt);
  }
  figure(`supervisor first restart (default backoff, median of ${RESTART_SAMPLES})`, ms(median(samples)));
}

async function eventThroughput(): Promise<void> {
  const value = new Value<number>();
  using watcher = value.watch();
  let received = 0;
  let last = -1;
  const consumer = (async () => {
    while (last < EVENT_COUNT - 1) {
      last = await watcher.get();
      received++;
    }
  })();
  const started = performance.now();
  for (let i = 0; i < EVENT_COUNT; i++) {
    value.set(i);
    if (i % 64 === 0) await Promise.resolve(); // give the watcher turns, as real producers do
  }
  await consumer;
  const seconds = (performance.now() - started) / 1000;
  figure("watchable value: sets per second", `${Math.round(EVENT_COUNT / seconds).toLocaleString("en")}`);
  figure("watchable value: updates seen by a watcher", `${received.toLocaleString("en")} of ${EVENT_COUNT.toLocaleString("en")} (rest collapsed)`);
}

if (!existsSync(INIT) || !existsSync(CTL)) {
  console.log("bench: building out/init and out/ctl first");
  const result = Bun.spawnSync([process.execPath, "run", "build"], { cwd: ROOT, stdout: "inherit", stderr: "inherit" });
  if (result.exitCode !== 0) process.exit(1);
}
console.log(`foundation figures (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores)`);
await binarySizes();
await startup();
await rssAfterStart();
await firstRestartLatency();
await eventThroughput();
