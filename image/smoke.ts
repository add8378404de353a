// Boot smoke test: builds the image and boots it once under qemu (TCG).
//
//   bun image/smoke.ts [--stand-in] [--kernel-format vmlinux|bzImage]
//                      [--cmdline "..."] [--timeout seconds]
//
// With out/init present (and no --stand-in) it builds out/image, boots that
// and passes once the init has printed a line and the kernel did not panic
// by the deadline (or qemu exit). Otherwise it compiles smoke_init.ts as a
// stand-in init and builds an image with it in a temp dir (out/ untouched);
// the stand-in loads the modules, reads fw_cfg opt/test, mounts the ESP,
// formats DATA as LUKS2 + ext4, runs etcd --version and powers off, and the
// test passes when it reports ok. Prints the console and how long each boot
// milestone took after qemu started.
// (A script rather than a bun test: it takes a minute and one qemu.)

import { existsSync, mkdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../internal/log/mod.ts";
import { run } from "./exec.ts";
import {
  BOOT_PACKAGES,
  bootAndWatch,
  buildImage,
  chooseAccelerator,
  cloneDisk,
  DEFAULT_INIT_BINARY,
  ensurePackages,
  manifestPaths,
  qemuArgs,
  REPO_ROOT,
  type BootResult,
  type ConsoleLine,
  type KernelFormat,
} from "./mod.ts";

const WORK_DIR = join(tmpdir(), "nodecore-image-smoke");
const STAND_IN_TIMEOUT_S = 300;
/** A real init runs until stopped: watch it this long. */
const REAL_INIT_TIMEOUT_S = 60;
const FW_CFG_TEST = { "opt/test": "hello" };
const STAND_IN_DONE = /^smoke: (ok|FAIL)/;
const STAND_IN_OK = /^smoke: ok/;
const RUN_INIT = /Run \/init as init process/;
const KERNEL_LINE = /^\[\s*\d+\.\d+\]/;
const FIRMWARE_DONE = /Booting from ROM/;
const KERNEL_PANIC = /Kernel panic/;

class SmokeTestError extends Error {
  override name = "SmokeTestError";
}

/**
 * The console from the kernel's "Run /init" on: what the init and its
 * children print. With "quiet" the kernel does not say it; then everything
 * after the firmware hands over to the kernel.
 */
function afterInit(lines: readonly ConsoleLine[]): readonly ConsoleLine[] {
  const runInit = lines.findIndex((l) => RUN_INIT.test(l.text));
  if (runInit >= 0) return lines.slice(runInit + 1);
  return lines.slice(lines.findIndex((l) => FIRMWARE_DONE.test(l.text)) + 1);
}

const first = (pattern: RegExp) => (lines: readonly ConsoleLine[]) => lines.find((l) => pattern.test(l.text));

/** Milestones on the console, each found in the lines. */
const MILESTONES: readonly [string, (lines: readonly ConsoleLine[]) => ConsoleLine | undefined][] = [
  ["first kernel line", first(/Linux version/)],
  ["initramfs unpack starts", first(/Trying to unpack rootfs/)],
  ["initramfs unpacked", first(/Freeing initrd memory/)],
  ["kernel runs /init", first(RUN_INIT)],
  ["first init line", (lines) => afterInit(lines).find((l) => !KERNEL_LINE.test(l.text))],
  ["modules loaded", first(/^smoke: loaded/)],
  ["stand-in done", first(STAND_IN_DONE)],
];

function report(result: BootResult): void {
  for (const [name, find] of MILESTONES) {
    const line = find(result.lines);
    if (line) process.stdout.write(`  ${(line.ms / 1000).toFixed(2).padStart(7)} s  ${name}\n`);
  }
}

const { values } = parseArgs({
  options: {
    "stand-in": { type: "boolean", default: false },
    "kernel-format": { type: "string" },
    cmdline: { type: "string" },
    timeout: { type: "string" },
  },
  strict: true,
});
const format: KernelFormat = values["kernel-format"] === "bzImage" ? "bzImage" : "vmlinux";
if (values["kernel-format"] !== undefined && values["kernel-format"] !== format) {
  throw new SmokeTestError(`unknown kernel format ${values["kernel-format"]}: want vmlinux or bzImage`);
}
const log = createLogger("image.smoke");

await ensurePackages(BOOT_PACKAGES);
mkdirSync(WORK_DIR, { recursive: true });
const realInit = join(REPO_ROOT, DEFAULT_INIT_BINARY);
const standIn = values["stand-in"] || !existsSync(realInit);
let init = realInit;
// The stand-in's image goes to the temp dir: out/image stays the real one.
const outDir = standIn ? join(WORK_DIR, "out") : undefined;
if (standIn) {
  init = join(WORK_DIR, "init");
  log.info("compiling the stand-in init", { dest: init });
  await run([process.execPath, "build", "--compile", join(import.meta.dir, "smoke_init.ts"), "--outfile", init]);
}

const manifest = await buildImage({ init, outDir, kernelFormat: format, logger: log });
const paths = manifestPaths(manifest, outDir);
const disk = join(WORK_DIR, "disk.img");
rmSync(disk, { force: true });
await cloneDisk(paths.disk, disk);

const accel = await chooseAccelerator({ kernel: paths.kernel });
log.info("qemu accelerator", { accel: accel.accel, reason: accel.reason });
const argv = qemuArgs({ kernel: paths.kernel, initramfs: paths.initramfs, disk, accel: accel.accel, cmdline: values.cmdline ?? manifest.cmdline, fwCfg: FW_CFG_TEST });
log.info("booting", { command: argv.join(" ") });
const result = await bootAndWatch(argv, {
  until: (line) => standIn && STAND_IN_DONE.test(line),
  timeoutMs: Number(values.timeout ?? (standIn ? STAND_IN_TIMEOUT_S : REAL_INIT_TIMEOUT_S)) * 1000,
  onLine: (line) => process.stdout.write(`${(line.ms / 1000).toFixed(2).padStart(7)} | ${line.text}\n`),
});
rmSync(disk, { force: true });

process.stdout.write(`\nboot milestones (${format}, seconds after qemu started):\n`);
report(result);
try {
  if (result.lines.some((l) => KERNEL_PANIC.test(l.text))) throw new SmokeTestError("the kernel panicked");
  if (!afterInit(result.lines).some((l) => !KERNEL_LINE.test(l.text))) throw new SmokeTestError("the init printed nothing");
  if (standIn && !result.lines.some((l) => STAND_IN_OK.test(l.text))) {
    throw new SmokeTestError(`stand-in init did not report ok${result.timedOut ? " before the deadline" : ""}`);
  }
  log.info("smoke test passed", { standIn, format });
} catch (error) {
  log.error("smoke test failed", { error });
  process.exitCode = 1;
}
