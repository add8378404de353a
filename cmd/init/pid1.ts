// What only PID 1 does: mount the pseudo file systems, load kernel modules,
// reap orphans, turn power requests into a clean shutdown, and show fatal
// conditions on the console. Logic lives in internal/sys; this is wiring.

import { closeSync, constants, mkdirSync, openSync, readdirSync, readSync } from "node:fs";
import { release } from "node:os";
import type { Logger } from "../../internal/log/mod.ts";
import { isSpawnedChild } from "../../internal/supervisor/mod.ts";
import { mountTable } from "../../internal/localstorage/mod.ts";
import { MNT_DETACH, MS_NODEV, MS_NOEXEC, MS_NOSUID, disableCtrlAltDel, loadModules, mount, reapOrphans, reboot, sync, umount } from "../../internal/sys/mod.ts";

/** An interval that holds the process open: pending promises do not keep bun's event loop alive. */
export const KEEPALIVE_INTERVAL_MS = 1 << 30;
/** How often PID 1 looks for zombies (a SIGCHLD also triggers a look). */
export const REAP_INTERVAL_MS = 1_000;
/** The image's module load list in /lib/modules/<release>/ (see image/layout.ts). */
export const MODULE_LOAD_LIST = "modules.load";

interface PseudoMount {
  source: string;
  target: string;
  fstype: string;
  flags: bigint;
  data?: string;
}

const PSEUDO_MOUNTS: PseudoMount[] = [
  { source: "proc", target: "/proc", fstype: "proc", flags: MS_NOSUID | MS_NODEV | MS_NOEXEC },
  { source: "sysfs", target: "/sys", fstype: "sysfs", flags: MS_NOSUID | MS_NODEV | MS_NOEXEC },
  { source: "devtmpfs", target: "/dev", fstype: "devtmpfs", flags: MS_NOSUID, data: "mode=0755" },
  { source: "devpts", target: "/dev/pts", fstype: "devpts", flags: MS_NOSUID | MS_NOEXEC, data: "gid=5,mode=0620,ptmxmode=0666" },
  { source: "tmpfs", target: "/dev/shm", fstype: "tmpfs", flags: MS_NOSUID | MS_NODEV },
  { source: "tmpfs", target: "/run", fstype: "tmpfs", flags: MS_NOSUID | MS_NODEV, data: "mode=0755" },
  { source: "tmpfs", target: "/tmp", fstype: "tmpfs", flags: MS_NOSUID | MS_NODEV },
  { source: "cgroup2", target: "/sys/fs/cgroup", fstype: "cgroup2", flags: MS_NOSUID | MS_NODEV | MS_NOEXEC },
];

function mountedTargets(): Set<string> {
  try {
    return new Set(mountTable().map((m) => m.target));
  } catch {
    return new Set();
  }
}

/** Mounts /proc, /sys, /dev and friends; skips what the pre-init already mounted. */
export function mountPseudoFilesystems(logger: Logger): void {
  for (const m of PSEUDO_MOUNTS) {
    if (mountedTargets().has(m.target)) continue;
    mkdirSync(m.target, { recursive: true });
    mount(m.source, m.target, m.fstype, m.flags, m.data ?? "");
  }
  logger.info("pseudo file systems mounted");
}

/** Loads the image's kernel modules in order. */
export function loadKernelModules(logger: Logger): void {
  const dir = `/lib/modules/${release()}`;
  const started = performance.now();
  const { loaded, skipped } = loadModules(dir, MODULE_LOAD_LIST);
  logger.info("kernel modules loaded", { count: loaded.length, ms: Math.round(performance.now() - started) });
  // The generic code serves instead: slower, never wrong.
  for (const { path, reason } of skipped) logger.info("a CPU-specific module was left out: the kernel's generic code serves", { module: path, reason });
}

/** Starts reaping orphans: on SIGCHLD and every REAP_INTERVAL_MS. */
export function startReaper(logger: Logger): void {
  const reapNow = () => {
    try {
      const reaped = reapOrphans(isSpawnedChild);
      if (reaped.length) logger.debug("reaped orphans", { pids: reaped });
    } catch (err) {
      logger.warn("reaping failed", { error: (err as Error).message });
    }
  };
  setInterval(reapNow, REAP_INTERVAL_MS);
  process.on("SIGCHLD", reapNow);
}

export type PowerAction = "poweroff" | "restart";

const EV_KEY = 1;
const KEY_POWER = 116;
const INPUT_EVENT_BYTES = 24;
/**
 * How often PID 1 reads the input devices. They are opened non-blocking and
 * polled: a blocking read (fs.createReadStream) parks one of bun's I/O
 * threads per device until a key is pressed, and then writes to child
 * processes' stdin pipes stall (cryptsetup --key-file - never gets its key).
 */
export const POWER_BUTTON_POLL_MS = 250;

/**
 * Calls `onRequest` when someone asks the node to power off or restart:
 * SIGTERM or SIGUSR2 (poweroff), SIGINT (Ctrl-Alt-Del, restart), and the
 * ACPI power button (qemu's system_powerdown), read from /dev/input.
 */
export function watchPowerRequests(onRequest: (action: PowerAction, why: string) => void, logger: Logger): void {
  process.on("SIGTERM", () => onRequest("poweroff", "SIGTERM"));
  process.on("SIGUSR2", () => onRequest("poweroff", "SIGUSR2"));
  process.on("SIGINT", () => onRequest("restart", "Ctrl-Alt-Del"));
  try {
    disableCtrlAltDel();
  } catch (err) {
    logger.warn("could not route Ctrl-Alt-Del to init", { error: (err as Error).message });
  }
  let devices: string[] = [];
  try {
    devices = readdirSync("/dev/input").filter((name) => name.startsWith("event"));
  } catch {
    // No input devices: no power button.
  }
  const buffer = Buffer.alloc(INPUT_EVENT_BYTES * 64);
  for (const name of devices) {
    let fd: number;
    try {
      fd = openSync(`/dev/input/${name}`, constants.O_RDONLY | constants.O_NONBLOCK);
    } catch (err) {
      logger.debug("input device unreadable", { device: name, error: (err as Error).message });
      continue;
    }
    const timer = setInterval(() => {
      for (;;) {
        let bytes: number;
        try {
          bytes = readSync(fd, buffer, 0, buffer.length, null);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === "EAGAIN") return;
          logger.debug("input device unreadable", { device: name, error: (err as Error).message });
          clearInterval(timer);
          closeSync(fd);
          return;
        }
        // evdev returns whole events only.
        for (let offset = 0; offset + INPUT_EVENT_BYTES <= bytes; offset += INPUT_EVENT_BYTES) {
          const type = buffer.readUInt16LE(offset + 16);
          const code = buffer.readUInt16LE(offset + 18);
          const value = buffer.readInt32LE(offset + 20);
          if (type === EV_KEY && code === KEY_POWER && value === 1) onRequest("poweroff", "power button");
        }
        if (bytes < buffer.length) return;
      }
    }, POWER_BUTTON_POLL_MS);
  }
  logger.info("watching for power requests", { inputDevices: devices.length });
}

/**
 * Unmounts everything writable, flushes, and powers off, restarts, or starts
 * the kernel loaded for kexec. Only returns if that fails.
 */
export function powerDown(action: PowerAction | "kexec", mountpoints: readonly string[], logger: Logger): void {
  const mounted = mountedTargets();
  for (const target of mountpoints.filter((t) => mounted.has(t))) {
    try {
      umount(target);
    } catch (err) {
      logger.warn("unmount failed, detaching", { target, error: (err as Error).message });
      try {
        umount(target, MNT_DETACH);
      } catch {
        // Nothing more to do; sync below still flushes what it can.
      }
    }
  }
  sync();
  logger.info({ poweroff: "powering off", restart: "restarting", kexec: "starting the loaded kernel" }[action]);
  reboot(action);
}

/** A fatal condition, framed so that it stands out on a serial console. */
export function showFatal(message: string): void {
  const lines = [
    "FATAL: this node cannot continue:",
    ...message.match(/.{1,70}(\s|$)|\S+/g)!.map((l) => `  ${l.trim()}`),
    "The node stays up so that it can be inspected; fix the cause and restart it.",
  ];
  const width = Math.max(...lines.map((l) => l.length));
  const bar = "#".repeat(width + 4);
  process.stderr.write(`\n${bar}\n${lines.map((l) => `# ${l.padEnd(width)} #`).join("\n")}\n${bar}\n\n`);
}
