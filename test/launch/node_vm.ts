// One node of a launched cluster: a qemu process inside the cluster's
// network namespace, booting the image with this node's disk copy, fw_cfg
// files and NIC, controlled through its QMP socket and watched through its
// serial console.
//
//   stopped ──start()──▶ running ──stop({clean}) / kill()──▶ stopped
//      ▲                    │ guest powers off, reboots (-no-reboot), panics
//      └────────────────────┘ qemu exits: stopped, with lastExit saying why

import { existsSync, rmSync } from "node:fs";
import type { Subprocess } from "bun";
import { qemuArgs, type Accelerator } from "../../image/mod.ts";
import type { Logger } from "../../internal/log/mod.ts";
import { awaitedMilestone } from "./boot_milestones.ts";
import type { NodeFiles } from "./cluster_dir.ts";
import type { NetworkNamespace } from "./network_namespace.ts";
import { FW_CFG_PARAMETERS, FW_CFG_STORAGE_TEST_KEY } from "./node_parameters.ts";
import { QmpClient, type QmpEvent } from "./qmp.ts";
import { SerialConsole, type ConsoleLine } from "./serial_console.ts";

/** A clean poweroff under TCG: services stop, file systems unmount. */
export const DEFAULT_POWERDOWN_TIMEOUT_MS = 120_000;
/** How long qemu gets to exit after QMP quit or SIGKILL. */
const EXIT_TIMEOUT_MS = 10_000;
/**
 * qemu warns about every fw_cfg name outside "opt/"; the node's names
 * (dev.nodecore/...) are what PID 1 reads, so the warning says nothing new.
 */
const EXPECTED_QEMU_WARNING = /warning: externally provided fw_cfg item names should be prefixed with "opt\/"/;

export type NodeState = "stopped" | "running" | "stopping";

export interface NodeVmConfig {
  name: string;
  /** 1-based. */
  index: number;
  mac: string;
  /** The address dnsmasq leases to mac. */
  address: string;
  tap: string;
  files: NodeFiles;
  kernel: string;
  initramfs: string;
  /** Whether files.parameters / files.storageTestKey are handed to the guest. */
  hasParameters: boolean;
  hasStorageTestKey: boolean;
  memoryMiB: number;
  cpus: number;
  /** KVM or TCG, as the cluster chose it (image/accel.ts). */
  accel: Accelerator;
  cmdline?: string;
  /** Echo the console to the terminal as "[node1] ...". */
  echo: boolean;
  ns: NetworkNamespace;
  logger: Logger;
}

/** How the last qemu process ended. */
export interface NodeExit {
  exitCode: number | null;
  signal: string | null;
  /** From qemu's SHUTDOWN event: "guest-shutdown", "guest-reset", "guest-panic", "host-qmp-quit", ... */
  reason: string | undefined;
}

export class NodeVmError extends Error {
  override name = "NodeVmError";
}

function escapeOptionValue(value: string): string {
  return value.replaceAll(",", ",,");
}

export class NodeVm {
  private child: Subprocess<"ignore", "pipe", "pipe"> | undefined;
  private qmpClient: QmpClient | undefined;
  private exitPromise: Promise<NodeExit> | undefined;
  private shutdownReason: string | undefined;
  private currentConsole: SerialConsole | undefined;
  private state_: NodeState = "stopped";
  /** How many times qemu was started for this node. */
  boots = 0;
  /**
   * Where the machine's battery-backed clock (RTC) stands against the
   * host's, in seconds, from the next start on (qemu -rtc base=): a machine
   * whose clock is off, as the node's kernel finds it at boot.
   */
  clockOffsetS = 0;
  lastExit: NodeExit | undefined;

  constructor(readonly config: NodeVmConfig) {}

  get name(): string {
    return this.config.name;
  }
  get address(): string {
    return this.config.address;
  }
  /** The host side of its NIC: a tap on the cluster bridge, inside the namespace. */
  get tap(): string {
    return this.config.tap;
  }
  get state(): NodeState {
    return this.state_;
  }
  get files(): NodeFiles {
    return this.config.files;
  }

  /** The console of the current (or last) boot. */
  get console(): SerialConsole {
    if (!this.currentConsole) throw new NodeVmError(`${this.name} was never started`);
    return this.currentConsole;
  }

  /** The qemu argv (without the namespace wrapper). */
  argv(): string[] {
    const { files } = this.config;
    const fwCfgFiles: Record<string, string> = {};
    // Read at every start, as firmware would: an operator who removed the
    // file hands the next boot no parameters.
    if (this.config.hasParameters && existsSync(files.parameters)) fwCfgFiles[FW_CFG_PARAMETERS] = files.parameters;
    if (this.config.hasStorageTestKey) fwCfgFiles[FW_CFG_STORAGE_TEST_KEY] = files.storageTestKey;
    return qemuArgs({
      kernel: this.config.kernel,
      initramfs: this.config.initramfs,
      disk: files.disk,
      memoryMiB: this.config.memoryMiB,
      cpus: this.config.cpus,
      accel: this.config.accel,
      ...(this.config.cmdline !== undefined ? { cmdline: this.config.cmdline } : {}),
      fwCfgFiles,
      extraArgs: [
        "-netdev",
        `tap,id=net0,ifname=${this.config.tap},script=no,downscript=no`,
        // romfile= (empty): no iPXE option ROM, which would wait for Ctrl-B.
        "-device",
        `virtio-net-pci,netdev=net0,mac=${this.config.mac},romfile=`,
        "-qmp",
        `unix:${escapeOptionValue(files.qmpSocket)},server=on,wait=off`,
        ...(this.clockOffsetS !== 0 ? ["-rtc", `base=${new Date(Date.now() + this.clockOffsetS * 1000).toISOString().slice(0, 19)}`] : []),
      ],
    });
  }

  /** Boots qemu on the node's disk; returns once QMP answers. */
  async start(): Promise<void> {
    if (this.state_ !== "stopped") throw new NodeVmError(`${this.name} is ${this.state_}; stop it first`);
    if (!existsSync(this.config.files.disk)) throw new NodeVmError(`${this.name} has no disk at ${this.config.files.disk}`);
    rmSync(this.config.files.qmpSocket, { force: true });
    this.boots++;
    this.shutdownReason = undefined;
    const serial = new SerialConsole(this.name, this.config.files.consoleLog, this.config.echo);
    this.currentConsole = serial;
    serial.note(`boot ${this.boots} of ${this.name}, qemu started at ${new Date().toISOString()}`);
    const child = this.config.ns.spawn(this.argv()) as Subprocess<"ignore", "pipe", "pipe">;
    this.child = child;
    this.state_ = "running";
    this.config.logger.info(`${this.name}: qemu started`, { pid: child.pid, boot: this.boots });

    const stderr = new Response(child.stderr).text();
    const consoleDone = serial.pump(child.stdout);
    this.exitPromise = (async () => {
      await child.exited;
      await Promise.race([consoleDone, Bun.sleep(EXIT_TIMEOUT_MS)]);
      const errors = (await Promise.race([stderr, Bun.sleep(EXIT_TIMEOUT_MS).then(() => "")]))
        .split("\n")
        .filter((l) => l.trim() !== "" && !EXPECTED_QEMU_WARNING.test(l))
        .join(" | ");
      const exit: NodeExit = { exitCode: child.exitCode, signal: child.signalCode === null ? null : String(child.signalCode), reason: this.shutdownReason };
      // Nobody here stopped it: the guest did (a reboot, a power-off, a crash).
      const byGuest = this.state_ === "running";
      const why = `qemu exited (${exit.reason ?? (exit.signal ? `signal ${exit.signal}` : `code ${exit.exitCode}`)})${errors ? `: ${errors}` : ""}`;
      serial.note(why);
      serial.end(why);
      this.lastExit = exit;
      this.qmpClient?.close();
      this.qmpClient = undefined;
      rmSync(this.config.files.qmpSocket, { force: true });
      this.child = undefined;
      this.state_ = "stopped";
      this.config.logger.info(`${this.name}: ${why}`);
      // qemu runs with -no-reboot, so a guest's reboot ends the process; the
      // machine starts again, as its firmware would. A power-off stays off.
      if (byGuest && exit.reason === "guest-reset") {
        this.config.logger.info(`${this.name}: the guest rebooted; starting it again`);
        this.start().catch((err: unknown) => this.config.logger.error(`${this.name}: could not start again after the guest's reboot: ${(err as Error).message}`));
      }
      return exit;
    })();

    try {
      this.qmpClient = await QmpClient.connect(this.config.files.qmpSocket, (event) => this.onQmpEvent(event));
    } catch (err) {
      await this.kill();
      throw new NodeVmError(`${this.name}: ${(err as Error).message}`, { cause: err });
    }
  }

  private onQmpEvent(event: QmpEvent): void {
    if (event.event === "SHUTDOWN" && typeof event.data?.reason === "string") this.shutdownReason = event.data.reason;
  }

  /** Resolves when the current qemu process is gone (at once if none runs). */
  exited(): Promise<NodeExit> {
    return this.exitPromise ?? Promise.resolve(this.lastExit ?? { exitCode: null, signal: null, reason: undefined });
  }

  /** The QMP connection of the running qemu. */
  qmp(): QmpClient {
    if (!this.qmpClient) throw new NodeVmError(`${this.name} is not running`);
    return this.qmpClient;
  }

  /** qemu's run state via QMP query-status ("running", "paused", ...). */
  async status(): Promise<string> {
    return this.qmp().status();
  }

  /**
   * Stops the node. clean (default): presses the ACPI power button
   * (system_powerdown) and waits for the guest to power off; throws if it
   * does not within timeoutMs (after killing qemu). Not clean: qemu quits at
   * once, like pulling the plug.
   */
  async stop(options: { clean?: boolean; timeoutMs?: number } = {}): Promise<NodeExit> {
    const exit = this.exitPromise;
    if (this.state_ === "stopped" || !exit) return this.lastExit ?? { exitCode: null, signal: null, reason: undefined };
    const clean = options.clean ?? true;
    this.state_ = "stopping";
    if (!clean) {
      await this.qmpClient?.execute("quit").catch(() => {});
      const done = await Promise.race([exit, Bun.sleep(EXIT_TIMEOUT_MS).then(() => undefined)]);
      return done ?? this.kill();
    }
    const timeoutMs = options.timeoutMs ?? DEFAULT_POWERDOWN_TIMEOUT_MS;
    this.config.logger.info(`${this.name}: pressing the power button (system_powerdown)`);
    try {
      await this.qmp().execute("system_powerdown");
    } catch (err) {
      await this.kill();
      throw new NodeVmError(`${this.name}: could not press the power button, killed qemu: ${(err as Error).message}`, { cause: err });
    }
    const done = await Promise.race([exit, Bun.sleep(timeoutMs).then(() => undefined)]);
    if (done) return done;
    await this.kill();
    throw new NodeVmError(`${this.name} did not power off within ${Math.round(timeoutMs / 1000)} s of system_powerdown; killed it`);
  }

  /** SIGKILLs qemu and waits for it to be gone. */
  async kill(): Promise<NodeExit> {
    const exit = this.exitPromise;
    if (this.state_ === "stopped" || !exit) return this.lastExit ?? { exitCode: null, signal: null, reason: undefined };
    this.state_ = "stopping";
    this.child?.kill("SIGKILL");
    return exit;
  }

  /** Power cycle: stop (clean by default), then boot the same disk again. */
  async reboot(options: { clean?: boolean; timeoutMs?: number } = {}): Promise<void> {
    await this.stop(options);
    await this.start();
  }

  /**
   * The reset button (QMP system_reset). qemu runs with -no-reboot, so a
   * reset ends the qemu process; the node boots again in a new one. (A
   * reboot by the guest itself is restarted by the exit handler in start.)
   */
  async reset(): Promise<void> {
    const exit = this.exitPromise;
    if (this.state_ !== "running" || !exit) throw new NodeVmError(`${this.name} is not running`);
    this.state_ = "stopping";
    await this.qmp()
      .execute("system_reset")
      .catch(() => this.kill());
    const done = await Promise.race([exit, Bun.sleep(EXIT_TIMEOUT_MS).then(() => undefined)]);
    if (!done) await this.kill();
    await this.start();
  }

  /**
   * The first line of the current boot matching pattern (seen or yet to
   * come). Unless it is already there, says what it waits for ("waiting for
   * node2 to be UP"), and again every WAIT_PROGRESS_INTERVAL_MS with the last
   * console line. milestone completes "waiting for node2 ..." (default: the
   * CONSOLE pattern's own, see awaitedMilestone()).
   */
  async waitForConsole(pattern: RegExp, timeoutMs: number, options: { milestone?: string } = {}): Promise<ConsoleLine> {
    const seen = this.console.find(pattern);
    if (seen) return seen;
    const awaited = `${this.name} ${options.milestone ?? awaitedMilestone(pattern)}`;
    this.config.logger.info(`waiting for ${awaited}`);
    return this.console.waitFor(pattern, {
      timeoutMs,
      awaited,
      onProgress: (elapsedMs, last) => {
        this.config.logger.info(`still waiting for ${awaited} (${Math.round(elapsedMs / 1000)} s)`, { last: last ? last.text.slice(0, 100) : "(console empty)" });
      },
    });
  }

  /** kill() for process exit: no event loop, never throws. */
  killSync(): void {
    try {
      this.child?.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }
}
