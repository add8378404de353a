// Booting the image under qemu: the command line, and a runner that follows
// the serial console line by line until a condition, a deadline or exit.
//
// The accelerator is the caller's choice (image/accel.ts probes which one
// works here: KVM where it runs a guest, TCG otherwise).

import { accelArgs, type Accelerator } from "./accel.ts";
import { DEFAULT_KERNEL_CMDLINE } from "./layout.ts";

export const QEMU_BINARY = "qemu-system-x86_64";
/** Memory of a VM without a Kubernetes role. */
export const DEFAULT_MEMORY_MIB = 1024;
/**
 * Memory of a VM that will hold Kubernetes roles, as the launcher gives
 * them: a worker runs containerd and the kubelet beside the node core and
 * its etcd; the controller (node 1, the bootstrap node) runs the apiserver,
 * controller-manager and scheduler too.
 */
export const WORKER_MEMORY_MIB = 1536;
export const CONTROLLER_MEMORY_MIB = 2560;
/**
 * vCPUs per VM: as many as this two-core machine has. qemu runs each vCPU
 * on a host thread of its own (multi-threaded TCG), so with two a node's
 * etcd, its bun event loop and bun's JIT and GC threads stop queueing for
 * one emulated core. One VM, same host hour (bench/boot.ts): "part of the
 * cluster" → UP took 11-18 s with 1 vCPU and 3.8-6.3 s with 2. A VM that
 * idles halts its vCPUs, so several VMs on the host only share the cores
 * that are busy.
 */
export const DEFAULT_CPUS = 2;
/** How long a killed qemu gets to exit before the runner stops waiting. */
const KILL_GRACE_MS = 5_000;

export interface QemuOptions {
  /** KVM or TCG: chooseAccelerator's decision (image/accel.ts). */
  accel: Accelerator;
  /** The kernel qemu boots: slot a's build, standing in for the firmware's fixed entry. */
  kernel: string;
  /** Its initrd: the slot's initramfs (the node OS). */
  initramfs: string;
  /** A per-node copy of the disk template (qemu writes to it): the slots are on it. */
  disk: string;
  memoryMiB?: number;
  /** vCPUs (DEFAULT_CPUS unless given). */
  cpus?: number;
  cmdline?: string;
  /** fw_cfg string items, by name ("opt/..."): the node reads them from sysfs. */
  fwCfg?: Record<string, string>;
  /** fw_cfg items whose contents come from host files (binary-safe), by name: path. */
  fwCfgFiles?: Record<string, string>;
  /** Appended as they are (network devices, serial sockets, ...). */
  extraArgs?: readonly string[];
}

/** qemu's option syntax doubles commas inside a value. */
function escapeOptionValue(value: string): string {
  return value.replaceAll(",", ",,");
}

/** The qemu argv that boots the image with the console on stdio. */
export function qemuArgs(options: QemuOptions): string[] {
  const argv = [
    QEMU_BINARY,
    ...accelArgs(options.accel),
    "-m",
    String(options.memoryMiB ?? DEFAULT_MEMORY_MIB),
    "-smp",
    String(options.cpus ?? DEFAULT_CPUS),
    "-nographic",
    "-no-reboot",
    // No default NIC: its iPXE option ROM waits about 1 s for Ctrl-B at every
    // boot. Network devices come through extraArgs; give them romfile= too.
    "-nic",
    "none",
    "-kernel",
    options.kernel,
    "-initrd",
    options.initramfs,
    "-append",
    options.cmdline ?? DEFAULT_KERNEL_CMDLINE,
    "-drive",
    `file=${escapeOptionValue(options.disk)},if=virtio,format=raw`,
  ];
  for (const [name, value] of Object.entries(options.fwCfg ?? {})) {
    argv.push("-fw_cfg", `name=${escapeOptionValue(name)},string=${escapeOptionValue(value)}`);
  }
  for (const [name, file] of Object.entries(options.fwCfgFiles ?? {})) {
    argv.push("-fw_cfg", `name=${escapeOptionValue(name)},file=${escapeOptionValue(file)}`);
  }
  return [...argv, ...(options.extraArgs ?? [])];
}

export interface ConsoleLine {
  /** Milliseconds since qemu was started. */
  ms: number;
  text: string;
}

export interface BootResult {
  lines: ConsoleLine[];
  /** The line that satisfied until, if one did. */
  matched: ConsoleLine | undefined;
  /** qemu's exit code, or undefined if it had to be killed or died of a signal. */
  exitCode: number | undefined;
  /** The signal qemu died of by itself (an assertion's SIGABRT), not the kill of this call. */
  signal: string | undefined;
  timedOut: boolean;
}

export interface BootOptions {
  /** Stop (and kill qemu) after the first line for which this is true. */
  until: (line: string) => boolean;
  timeoutMs: number;
  /** Called with every console line as it arrives. */
  onLine?: (line: ConsoleLine) => void;
}

/**
 * Runs qemu (argv from qemuArgs), collecting console lines until options.until
 * matches, qemu exits or the deadline passes; qemu never outlives this call.
 */
export async function bootAndWatch(argv: readonly string[], options: BootOptions): Promise<BootResult> {
  const started = performance.now();
  const child = Bun.spawn([...argv], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
  const lines: ConsoleLine[] = [];
  let matched: ConsoleLine | undefined;
  let timedOut = false;
  const deadline = setTimeout(() => {
    timedOut = true;
    child.kill("SIGKILL");
  }, options.timeoutMs);
  const stderr = new Response(child.stderr).text();
  try {
    const decoder = new TextDecoder();
    let pending = "";
    const take = (text: string): void => {
      const line = { ms: performance.now() - started, text: text.replace(/\r/g, "") };
      lines.push(line);
      options.onLine?.(line);
      if (matched === undefined && options.until(line.text)) matched = line;
    };
    for await (const chunk of child.stdout) {
      pending += decoder.decode(chunk, { stream: true });
      let newline: number;
      while ((newline = pending.indexOf("\n")) >= 0) {
        take(pending.slice(0, newline));
        pending = pending.slice(newline + 1);
      }
      if (matched !== undefined) break;
    }
    if (pending !== "" && matched === undefined) take(pending);
  } finally {
    clearTimeout(deadline);
    if (child.exitCode === null) child.kill("SIGKILL");
    await Promise.race([child.exited, Bun.sleep(KILL_GRACE_MS)]);
  }
  const killed = child.signalCode !== null;
  const ownKill = timedOut || matched !== undefined;
  const errors = await Promise.race([stderr, Bun.sleep(KILL_GRACE_MS).then(() => "")]);
  // A line each, as the console's: a reason made of them is one line.
  const ms = performance.now() - started;
  for (const text of errors.split("\n")) if (text.trim() !== "") lines.push({ ms, text: `[qemu stderr] ${text.replace(/\r/g, "").trim()}` });
  return { lines, matched, exitCode: killed ? undefined : (child.exitCode ?? undefined), signal: !ownKill && child.signalCode !== null ? String(child.signalCode) : undefined, timedOut };
}
