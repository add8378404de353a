// Which accelerator qemu runs the nodes with: KVM where it really runs a
// guest, software emulation (TCG) otherwise.
//
// Under KVM a node boots in seconds; under TCG every guest instruction is
// translated, 10-50× slower. A /dev/kvm that opens is not enough to know:
// on this project's own build machine /dev/kvm opens, and qemu even runs
// the BIOS, but a Linux kernel never gets past its first instructions in
// long mode. So the probe boots the node's own kernel under KVM, with no
// initramfs and `panic=-1`: a kernel that reaches "Kernel panic … unable
// to mount root fs" has set up paging, interrupts and timers, and on a
// working KVM gets there in about a second. Nothing within PROBE_TIMEOUT_MS
// means KVM cannot run our guests here.
//
// The decision is cached in out/accel.json for as long as the host is up,
// /dev/kvm is the same device with the same owner and mode, and qemu is the
// same binary: a launch after the first pays nothing for it.

import { existsSync, mkdirSync, openSync, closeSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { REPO_ROOT } from "./layout.ts";
import { bootAndWatch, QEMU_BINARY } from "./qemu.ts";

export type Accelerator = "kvm" | "tcg";
export const ACCELERATORS: readonly Accelerator[] = ["kvm", "tcg"];

export interface AcceleratorChoice {
  accel: Accelerator;
  /** One line: why this one ("KVM boots a kernel here in 0.9 s", "/dev/kvm is missing: …"). */
  reason: string;
}

/** How long the probe's kernel gets to reach its panic under KVM (a working KVM needs about a second). */
export const PROBE_TIMEOUT_MS = 10_000;
const DEV_KVM = "/dev/kvm";
/** The kernel under the probe got all the way to looking for its root file system. */
const PROBE_REACHED = /Kernel panic|VFS: Unable to mount root|Unable to mount root fs/;

export class AcceleratorError extends Error {
  override name = "AcceleratorError";
}

export interface ProbeOptions {
  /** The kernel to boot (the node image's). */
  kernel: string;
  /** What the user asked for (--accel); undefined lets the probe choose. */
  asked?: Accelerator | undefined;
  /** The cache file (default out/accel.json); null probes without a cache. */
  cacheFile?: string | null;
  /** For tests: the qemu binary and the device to check. */
  qemu?: string;
  device?: string;
  timeoutMs?: number;
}

/** Why KVM cannot be used without trying it, or undefined if the device is there and opens. */
function deviceProblem(device: string): string | undefined {
  if (!existsSync(device)) return `${device} is missing (no kvm module loaded, or a VM without nested virtualization)`;
  try {
    closeSync(openSync(device, "r+"));
    return undefined;
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code ?? (error as Error).message;
    return `${device} cannot be opened (${code}${code === "EACCES" ? ": join the kvm group, or run as root" : ""})`;
  }
}

/** Boots `kernel` under KVM; undefined if it ran, or why not. */
async function bootProblem(kernel: string, qemu: string, device: string, timeoutMs: number): Promise<{ problem?: string; seconds: number }> {
  const argv = [
    qemu,
    "-accel",
    "kvm",
    "-cpu",
    "host",
    "-m",
    "256",
    "-smp",
    "1",
    "-nodefaults",
    "-display",
    "none",
    "-serial",
    "stdio",
    "-no-reboot",
    "-kernel",
    kernel,
    "-append",
    "console=ttyS0 panic=-1 loglevel=4",
  ];
  const started = performance.now();
  let result;
  try {
    result = await bootAndWatch(argv, { until: (line) => PROBE_REACHED.test(line), timeoutMs });
  } catch (error) {
    return { problem: `qemu could not start: ${(error as Error).message}`, seconds: 0 };
  }
  const seconds = (performance.now() - started) / 1000;
  if (result.matched) return { seconds };
  // qemu's own words: its last error line, else its last line about KVM
  // or a failure (an assertion after "error: failed to set MSR" names less).
  const texts = result.lines.map((l) => l.text.replace(/^\[qemu stderr\] /, "").trim());
  const said = texts.filter((t) => /\berror\b/i.test(t)).at(-1) ?? texts.filter((t) => /kvm|failed/i.test(t)).at(-1);
  if (result.timedOut) return { problem: `${device} opens, but a kernel under KVM did not boot within ${timeoutMs / 1000} s${said ? ` (qemu: ${said})` : ""}`, seconds };
  const ended = result.signal !== undefined ? `was killed by ${result.signal}` : `exited with code ${result.exitCode ?? "?"}`;
  return { problem: `qemu -accel kvm ${ended}${said ? `: ${said}` : ""}`, seconds };
}

/** What the cached decision depends on: the host's boot, the device, and qemu. */
function cacheKey(device: string, qemu: string): string {
  const bootId = existsSync("/proc/sys/kernel/random/boot_id") ? readFileSync("/proc/sys/kernel/random/boot_id", "utf8").trim() : "?";
  const dev = existsSync(device) ? statSync(device) : undefined;
  const qemuPath = Bun.which(qemu) ?? qemu;
  const bin = existsSync(qemuPath) ? statSync(qemuPath) : undefined;
  return JSON.stringify([bootId, dev && [dev.rdev, dev.mode, dev.uid, dev.gid], qemuPath, bin && [bin.size, bin.mtimeMs]]);
}

/** The longest reason the launcher prints (qemu's words are bounded by it). */
const MAX_REASON_CHARS = 300;

/** A reason on one line, whatever went into it: the launcher's first lines and the e2e print it. */
function oneLineReason(reason: string): string {
  const line = reason.replace(/\s+/g, " ").trim();
  return line.length > MAX_REASON_CHARS ? `${line.slice(0, MAX_REASON_CHARS - 1)}…` : line;
}

function readCache(file: string, key: string): AcceleratorChoice | undefined {
  try {
    const cached = JSON.parse(readFileSync(file, "utf8")) as { key?: string; accel?: string; reason?: string };
    if (cached.key === key && (cached.accel === "kvm" || cached.accel === "tcg") && typeof cached.reason === "string") return { accel: cached.accel, reason: oneLineReason(cached.reason) };
  } catch {
    // None yet, or unreadable: probe.
  }
  return undefined;
}

/**
 * Chooses the accelerator for `kernel`'s VMs (see the top of the file).
 * `asked: "tcg"` is taken as it is; `asked: "kvm"` is checked, and throws
 * AcceleratorError with the reason when KVM cannot run a guest here.
 */
export async function chooseAccelerator(options: ProbeOptions): Promise<AcceleratorChoice> {
  if (options.asked === "tcg") return { accel: "tcg", reason: "as asked (--accel tcg)" };
  const device = options.device ?? DEV_KVM;
  const qemu = options.qemu ?? QEMU_BINARY;
  const cacheFile = options.cacheFile === undefined ? join(REPO_ROOT, "out", "accel.json") : options.cacheFile;
  const key = cacheKey(device, qemu);
  let choice = cacheFile ? readCache(cacheFile, key) : undefined;
  if (!choice) {
    let problem = deviceProblem(device);
    let seconds = 0;
    if (problem === undefined) ({ problem, seconds } = await bootProblem(options.kernel, qemu, device, options.timeoutMs ?? PROBE_TIMEOUT_MS));
    choice =
      problem === undefined
        ? { accel: "kvm", reason: `KVM works here (a kernel booted under it in ${seconds.toFixed(1)} s)` }
        : { accel: "tcg", reason: oneLineReason(`software emulation, because ${problem}`) };
    if (cacheFile) {
      mkdirSync(dirname(cacheFile), { recursive: true });
      writeFileSync(cacheFile, `${JSON.stringify({ key, ...choice, probed: new Date().toISOString() })}\n`);
    }
  }
  if (options.asked === "kvm" && choice.accel !== "kvm") throw new AcceleratorError(`--accel kvm: KVM cannot run a guest on this host: ${choice.reason.replace(/^software emulation, because /, "")}`);
  return options.asked === "kvm" ? { accel: "kvm", reason: `as asked (--accel kvm); ${choice.reason}` } : choice;
}

/** qemu's accelerator and CPU model: the host's CPU under KVM; under TCG `max` (bun dies on an invalid opcode with qemu's default model). */
export function accelArgs(accel: Accelerator): string[] {
  return accel === "kvm" ? ["-accel", "kvm", "-cpu", "host"] : ["-accel", "tcg", "-cpu", "max"];
}
