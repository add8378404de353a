// Boot figures of the node image under qemu (KVM where it works, else TCG; DEFAULT_CPUS vCPUs): how
// long after qemu starts a node reaches each milestone on its first boot
// (formats its data partition, bootstraps a cluster) and on its second (same
// disk), how long a clean poweroff takes, the image's sizes, and the floor:
// the same kernel and initramfs contents booting a stand-in init that
// powers off at once (bench/floor_init.ts). Prints figures; asserts nothing.
//
//   bun bench/boot.ts [--runs N] [--cpus N] [--no-build] [--image-dir dir] [--consoles dir]
//
// --consoles writes each boot's console, with host receive times, to
// dir/run<N>-boot<B>.txt: where the time went.
//
// Times are host receive times of console lines (the guest's clocks are not
// the host's). One VM runs at a time.

import { mkdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { bootAndWatch, buildImage, chooseAccelerator, cloneDisk, DEFAULT_CPUS, manifestPaths, qemuArgs, readManifest, REPO_ROOT, type ConsoleLine } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { BOOT_MILESTONES, CONSOLE, createCluster, ensureBuilt, runHostCommand } from "../test/launch/mod.ts";
import { spread } from "./figures.ts";
import { benchArgs, IMAGE_FLAGS, imageDirOf, wholeNumber } from "./args.ts";

const UP_TIMEOUT_MS = 300_000;
const FLOOR_TIMEOUT_MS = 180_000;
const FLOOR_DIR = join(tmpdir(), "nodecore-bench-floor");
const FLOOR_LINE = /^floor: init started/;
const MIB = 1024 * 1024;

const { values } = benchArgs({
  runs: { type: "string", default: "1", help: "boots of each kind" },
  ...IMAGE_FLAGS,
  cpus: { type: "string", help: `vCPUs per VM (default ${DEFAULT_CPUS})` },
  consoles: { type: "string", help: "write each boot's console to this directory" },
});
const runs = wholeNumber("--runs", values.runs);
const cpus = values.cpus === undefined ? DEFAULT_CPUS : wholeNumber("--cpus", values.cpus);
const imageDir = imageDirOf(values);
const log = createLogger("bench.boot");

const mib = (bytes: number) => `${(bytes / MIB).toFixed(1)} MiB`;
const allocated = (path: string) => statSync(path).blocks * 512;
const median = (xs: readonly number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const secs = (ms: number | undefined) => (ms === undefined ? "—" : `${(ms / 1000).toFixed(1)} s`);

/** The time from one milestone to another in one boot, if both were seen. */
function span(timings: Timings, from: string, to: string): number | undefined {
  const a = timings.get(from);
  const b = timings.get(to);
  return a === undefined || b === undefined ? undefined : b - a;
}

const seconds2 = (ms: number | undefined) => (ms === undefined ? "—" : `${(ms / 1000).toFixed(2)} s`);

/** Milestone name → ms after qemu started, for one boot. */
type Timings = Map<string, number>;

function timingsOf(lines: readonly ConsoleLine[], extra: Record<string, number | undefined> = {}): Timings {
  const timings: Timings = new Map();
  for (const { name, pattern } of BOOT_MILESTONES) {
    const line = lines.find((l) => pattern.test(l.text));
    if (line) timings.set(name, line.ms);
  }
  for (const [name, ms] of Object.entries(extra)) if (ms !== undefined) timings.set(name, ms);
  return timings;
}

/** The floor: the same kernel and initramfs contents with a stand-in init that powers off at once. */
async function floorBoot(): Promise<Timings> {
  mkdirSync(FLOOR_DIR, { recursive: true });
  const init = join(FLOOR_DIR, "init");
  // Compiled as out/init is (build.ts): minified, with bytecode.
  await runHostCommand([process.execPath, "build", "--compile", "--minify", "--bytecode", join(import.meta.dir, "floor_init.ts"), "--outfile", init]);
  const outDir = join(FLOOR_DIR, "out");
  const manifest = await buildImage({ init, outDir, installPackages: false, logger: createLogger("bench.floor", { format: "none" }) });
  const paths = manifestPaths(manifest, outDir);
  const disk = join(FLOOR_DIR, "disk.img");
  rmSync(disk, { force: true });
  await cloneDisk(paths.disk, disk);
  log.info("booting the floor (stand-in init that powers off at once)");
  const started = performance.now();
  const result = await bootAndWatch(qemuArgs({ kernel: paths.kernel, initramfs: paths.initramfs, disk, cpus, accel: accel.accel, cmdline: manifest.cmdline }), {
    until: () => false,
    timeoutMs: FLOOR_TIMEOUT_MS,
  });
  const exitedMs = performance.now() - started;
  rmSync(disk, { force: true });
  if (result.timedOut || !result.lines.some((l) => FLOOR_LINE.test(l.text)))
    throw new Error(
      `the floor boot did not power off by itself: ${result.lines
        .slice(-5)
        .map((l) => l.text)
        .join(" | ")}`,
    );
  const timings = timingsOf(result.lines, { "qemu exited (powered off)": exitedMs });
  const first = result.lines.find((l) => FLOOR_LINE.test(l.text));
  if (first) timings.set("first init log line", first.ms);
  return timings;
}

interface NodeRun {
  first: Timings;
  second: Timings;
  diskAllocatedBytes: number;
}

/** One fresh node: first boot to UP, clean poweroff, second boot to UP, clean poweroff. */
async function nodeRun(run: number): Promise<NodeRun> {
  const cluster = await createCluster({ name: "bench", quiet: true, cpus, imageDir, logger: log.child("launch") });
  try {
    const node = cluster.node("node1");
    let boots = 0;
    const boot = async (): Promise<Timings> => {
      await node.start();
      await node.waitForConsole(CONSOLE.nodeUp, UP_TIMEOUT_MS);
      const lines = [...node.console.lines];
      if (values.consoles) {
        mkdirSync(values.consoles, { recursive: true });
        const text = lines.map((l) => `${(l.ms / 1000).toFixed(3).padStart(8)} ${l.text}`).join("\n");
        writeFileSync(join(values.consoles, `run${run}-boot${++boots}.txt`), `${text}\n`);
      }
      const pressed = performance.now();
      const exit = await node.stop({ clean: true });
      if (exit.reason !== "guest-shutdown") throw new Error(`node1 did not power off cleanly: ${JSON.stringify(exit)}`);
      return timingsOf(lines, { "clean poweroff (button to qemu exit)": performance.now() - pressed });
    };
    const first = await boot();
    const diskAllocatedBytes = allocated(node.files.disk);
    const second = await boot();
    return { first, second, diskAllocatedBytes };
  } finally {
    await cluster.close();
  }
}

if (!values["no-build"]) await ensureBuilt(log);
const manifest = readManifest(imageDir);
const image = manifestPaths(manifest, imageDir);
const accel = await chooseAccelerator({ kernel: image.kernel });
log.info(`qemu accelerator: ${accel.accel} (${accel.reason})`);

const floor = await floorBoot();
const nodeRuns: NodeRun[] = [];
for (let i = 0; i < runs; i++) {
  log.info(`node boots, run ${i + 1} of ${runs}`);
  nodeRuns.push(await nodeRun(i + 1));
}

const rows = [...BOOT_MILESTONES.map((m) => m.name), "clean poweroff (button to qemu exit)", "qemu exited (powered off)"];
const column = (pick: (r: NodeRun) => Timings) => (name: string) => median(nodeRuns.flatMap((r) => (pick(r).has(name) ? [pick(r).get(name)!] : [])));
const firstOf = column((r) => r.first);
const secondOf = column((r) => r.second);
const width = Math.max(...rows.map((r) => r.length));
const out: string[] = [
  "",
  `boot figures: seconds after qemu started (host receive times), ${accel.accel.toUpperCase()}, ${cpus} vCPU${cpus === 1 ? "" : "s"}, ${runs === 1 ? "one run" : `median of ${runs} runs`}`,
  `${"".padEnd(width)}  ${"floor".padStart(8)}  ${"boot 1".padStart(8)}  ${"boot 2".padStart(8)}`,
  ...rows.map((name) => `${name.padEnd(width)}  ${secs(floor.get(name)).padStart(8)}  ${secs(firstOf(name)).padStart(8)}  ${secs(secondOf(name)).padStart(8)}`),
  "  floor: same kernel and initramfs contents, a stand-in init that powers off at once (no NIC)",
  "  boot 1: fresh disk (formats LUKS2 + ext4, bootstraps the cluster); boot 2: same disk (mounts, cold start)",
  "",
  "init start (kernel runs /init) → first init log line; the floor is a bun hello-world (minified, bytecode), as out/init is built",
  `  floor ${seconds2(span(floor, "kernel runs /init", "first init log line"))}`,
  ...(["first", "second"] as const).map((boot) => {
    const spans = nodeRuns.flatMap((r) => {
      const v = span(r[boot], "kernel runs /init", "first init log line");
      return v === undefined ? [] : [v];
    });
    const floorSpan = span(floor, "kernel runs /init", "first init log line");
    const ratio = spans.length === 0 || floorSpan === undefined || floorSpan <= 0 ? "—" : `${(median(spans)! / floorSpan).toFixed(2)}x the floor`;
    return `  boot ${boot === "first" ? 1 : 2} ${spread(spans, 2)} (median ${ratio})`;
  }),
  "",
  `min / median / max over ${runs} run${runs === 1 ? "" : "s"}`,
  ...(["first", "second"] as const).flatMap((boot) => [
    `  boot ${boot === "first" ? 1 : 2}: qemu start → node is UP        ${spread(
      nodeRuns.flatMap((r) => (r[boot].has("node is UP") ? [r[boot].get("node is UP")!] : [])),
      2,
    )}`,
    `  boot ${boot === "first" ? 1 : 2}: part of the cluster → UP    ${spread(
      nodeRuns.flatMap((r) => {
        const v = span(r[boot], "part of the cluster", "node is UP");
        return v === undefined ? [] : [v];
      }),
      2,
    )}`,
  ]),
  "",
  "sizes",
  `  kernel (${manifest.kernel.format})${"".padEnd(8)} ${mib(manifest.kernel.bytes)}`,
  `  initramfs (lz4)          ${mib(manifest.initramfs.bytes)} (its out/init: ${mib(statSync(resolve(REPO_ROOT, manifest.initramfs.init.source)).size)})`,
  `  disk template            ${mib(manifest.disk.bytes)} apparent, ${mib(allocated(image.disk))} allocated`,
  `  node disk after boot 1   ${mib(median(nodeRuns.map((r) => r.diskAllocatedBytes))!)} allocated`,
  "",
];
process.stdout.write(out.join("\n"));
