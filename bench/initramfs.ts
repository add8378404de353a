// The initramfs compressed, or not: the size of each variant, and how long
// the kernel takes from qemu start to running /init with it (the unpacking
// is in that span) under TCG. Boots the image's own kernel with its
// initramfs's contents (out/image) in each variant, stops each VM as soon
// as /init runs, one VM at a time. Prints figures; asserts nothing. The
// image build uses lz4 -l -9 (image/initramfs.ts says why).
//
//   bun bench/initramfs.ts [--runs N] [--image-dir dir]
//
// The kernel (Debian's) unpacks gzip, lz4 (legacy frames only: `lz4 -l`),
// zstd and xz itself; each variant is the same cpio piped through the tool.

import { mkdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { bootAndWatch, chooseAccelerator, cloneDisk, DEFAULT_CPUS, manifestPaths, OUT_DIR, qemuArgs, readManifest, REPO_ROOT } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { CONSOLE, runHostCommand } from "../test/launch/mod.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const BOOT_TIMEOUT_MS = 120_000;
const MIB = 1024 * 1024;
/** The kernel's own clock on a console line: "[    4.123456] ...". */
const KERNEL_STAMP = /^\[\s*(\d+\.\d+)\]/;

const { values } = benchArgs({
  runs: { type: "string", default: "3", help: "boots of each variant" },
  "image-dir": { type: "string", help: "the image whose kernel and initramfs to use (default out/image)" },
});
const runs = wholeNumber("--runs", values.runs);
const imageDir = values["image-dir"] ?? join(REPO_ROOT, OUT_DIR);
const log = createLogger("bench.initramfs");

interface Variant {
  name: string;
  /** The command that turns the cpio on stdin into the variant on stdout; none for the cpio itself. */
  compress?: string[];
}

const VARIANTS: Variant[] = [
  { name: "none" },
  { name: "lz4 -l -1", compress: ["lz4", "-l", "-1", "-c"] },
  { name: "lz4 -l -9", compress: ["lz4", "-l", "-9", "-c"] },
  { name: "zstd -3", compress: ["zstd", "-3", "-c", "-T0"] },
  { name: "gzip -6", compress: ["gzip", "-6", "-c"] },
];

const manifest = readManifest(imageDir);
const image = manifestPaths(manifest, imageDir);
const accel = await chooseAccelerator({ kernel: image.kernel });
const workDir = join(tmpdir(), "nodecore-bench-initramfs");
mkdirSync(workDir, { recursive: true });
const disk = join(workDir, "disk.img");
/** The image's archive, uncompressed: every variant starts from it. */
const cpio = join(workDir, "initramfs.cpio");
await runHostCommand(["lz4", "-d", "-f", "-q", image.initramfs, cpio]);

async function variantFile(variant: Variant, index: number): Promise<{ path: string; seconds: number }> {
  if (!variant.compress) return { path: cpio, seconds: 0 };
  const path = join(workDir, `initramfs.${index}`);
  const started = performance.now();
  await runHostCommand(["sh", "-c", `${variant.compress.join(" ")} < "$1" > "$2"`, "sh", cpio, path]);
  return { path, seconds: (performance.now() - started) / 1000 };
}

/** qemu start → "Run /init" on the host's clock, and the kernel's own stamp on that line. */
async function bootToInit(initramfs: string): Promise<{ hostMs: number; kernelS: number | undefined }> {
  rmSync(disk, { force: true });
  await cloneDisk(image.disk, disk);
  const result = await bootAndWatch(qemuArgs({ kernel: image.kernel, initramfs, disk, accel: accel.accel }), { until: (text) => CONSOLE.kernelRunsInit.test(text), timeoutMs: BOOT_TIMEOUT_MS });
  if (!result.matched)
    throw new Error(
      `the kernel did not run /init: ${result.lines
        .slice(-5)
        .map((l) => l.text)
        .join(" | ")}`,
    );
  const stamp = KERNEL_STAMP.exec(result.matched.text);
  return { hostMs: result.matched.ms, kernelS: stamp ? Number(stamp[1]) : undefined };
}

const rows: string[] = [];
for (const [index, variant] of VARIANTS.entries()) {
  const { path, seconds } = await variantFile(variant, index);
  const bytes = statSync(path).size;
  const boots: { hostMs: number; kernelS: number | undefined }[] = [];
  for (let run = 0; run < runs; run++) {
    log.info("booting", { variant: variant.name, run: run + 1, of: runs });
    boots.push(await bootToInit(path));
  }
  const host = boots.map((b) => b.hostMs / 1000).sort((a, b) => a - b);
  const kernel = boots.flatMap((b) => (b.kernelS === undefined ? [] : [b.kernelS])).sort((a, b) => a - b);
  const range = (xs: number[]) => (xs.length === 0 ? "—" : `${xs[0]!.toFixed(2)} / ${xs[Math.floor(xs.length / 2)]!.toFixed(2)} / ${xs.at(-1)!.toFixed(2)}`);
  rows.push(`${variant.name.padEnd(10)} ${`${(bytes / MIB).toFixed(1)} MiB`.padStart(10)} ${`${seconds.toFixed(1)} s`.padStart(8)}   ${range(host).padStart(20)}   ${range(kernel).padStart(20)}`);
  if (variant.compress) rmSync(path, { force: true });
}
rmSync(workDir, { recursive: true, force: true });

process.stdout.write(
  [
    "",
    `initramfs variants: qemu start → kernel runs /init (${accel.accel.toUpperCase()}, ${DEFAULT_CPUS} vCPUs, ${runs} boots each; min / median / max, seconds)`,
    `${"variant".padEnd(10)} ${"size".padStart(10)} ${"build".padStart(8)}   ${"host clock".padStart(20)}   ${"kernel clock".padStart(20)}`,
    ...rows,
    "",
  ].join("\n"),
);
