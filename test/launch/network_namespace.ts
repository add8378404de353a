// The cluster's private network: a Linux network namespace holding a bridge
// and one tap per node. Nothing connects it to the host's namespace (no veth,
// no forwarding), so guest traffic can reach the other guests, dnsmasq on the
// bridge, and processes started inside the namespace — nothing else.

import { existsSync, readdirSync } from "node:fs";
import { runHostCommand, runHostCommandSync, type HostCommandOptions, type HostCommandResult } from "./host_command.ts";

/** Every namespace the launcher creates is named `${NAMESPACE_PREFIX}<launcher pid>-<cluster name>`. */
export const NAMESPACE_PREFIX = "nodecore-";
export const BRIDGE_NAME = "br0";
/** Where `ip netns add` puts named namespaces. */
const NETNS_DIR = "/run/netns";
/** Namespace names are files; keep them short enough to read in `ip netns list`. */
const MAX_NAME_CHARS = 48;

/**
 * Every child the launcher starts in the namespace (qemu, dnsmasq, commands)
 * runs in its own session (setsid: a Ctrl-C in the terminal reaches only the
 * launcher, which then tears down in order) and with a parent-death signal
 * (setpriv --pdeathsig KILL: if the launcher is SIGKILLed, where no handler
 * runs, the kernel kills its VMs and dnsmasq). Both exec in place, so the
 * pid the launcher holds is the command's own.
 */
export const CHILD_WRAPPER = ["setsid", "setpriv", "--pdeathsig", "KILL", "--"] as const;

/** An IPv4 /24 inside the namespace: the bridge is .1, node i is .(10+i). */
export interface Subnet {
  /** "10.77.0" */
  prefix: string;
  bridgeAddress: string;
}

export const FIRST_NODE_HOST = 10;

export function subnetOf(index: number): Subnet {
  if (!Number.isInteger(index) || index < 0 || index > 255) throw new RangeError(`subnet index must be 0..255, got ${index}`);
  const prefix = `10.77.${index}`;
  return { prefix, bridgeAddress: `${prefix}.1` };
}

/** Node i's (1-based) address in the subnet. */
export function nodeAddress(subnet: Subnet, index: number): string {
  return `${subnet.prefix}.${FIRST_NODE_HOST + index}`;
}

export function namespaceName(clusterName: string, pid = process.pid): string {
  return `${NAMESPACE_PREFIX}${pid}-${clusterName}`.slice(0, MAX_NAME_CHARS);
}

export class NetworkNamespace {
  private destroyed = false;
  private readonly taps = new Set<string>();

  private constructor(
    readonly name: string,
    readonly subnet: Subnet,
  ) {}

  /** Creates the namespace with lo up and the bridge at subnet.bridgeAddress/24. */
  static async create(name: string, subnet: Subnet): Promise<NetworkNamespace> {
    if (existsSync(`${NETNS_DIR}/${name}`)) throw new Error(`network namespace ${name} already exists`);
    await runHostCommand(["ip", "netns", "add", name]);
    const ns = new NetworkNamespace(name, subnet);
    try {
      await ns.ip(["link", "set", "lo", "up"]);
      await ns.ip(["link", "add", BRIDGE_NAME, "type", "bridge"]);
      await ns.ip(["addr", "add", `${subnet.bridgeAddress}/24`, "dev", BRIDGE_NAME]);
      await ns.ip(["link", "set", BRIDGE_NAME, "up"]);
    } catch (err) {
      await ns.destroy();
      throw err;
    }
    return ns;
  }

  /** `ip -n <ns> ...` */
  async ip(args: readonly string[]): Promise<HostCommandResult> {
    return runHostCommand(["ip", "-n", this.name, ...args]);
  }

  /** Adds a tap (for one qemu NIC) to the bridge. */
  async addTap(tap: string): Promise<void> {
    await this.ip(["tuntap", "add", "dev", tap, "mode", "tap"]);
    this.taps.add(tap);
    await this.ip(["link", "set", tap, "master", BRIDGE_NAME]);
    await this.ip(["link", "set", tap, "up"]);
  }

  /** argv that runs a command inside the namespace, dying with the launcher. */
  command(argv: readonly string[]): string[] {
    return [...CHILD_WRAPPER, "ip", "netns", "exec", this.name, ...argv];
  }

  /** Runs a host command inside the namespace to completion (e.g. out/ctl against a guest). */
  async run(argv: readonly string[], options: HostCommandOptions = {}): Promise<HostCommandResult> {
    return runHostCommand(this.command(argv), options);
  }

  /** Starts a long-running host command inside the namespace; the caller owns the process. */
  spawn(argv: readonly string[], options: { stdout?: "pipe" | "ignore"; stderr?: "pipe" | "ignore" } = {}) {
    return Bun.spawn(this.command(argv), { stdin: "ignore", stdout: options.stdout ?? "pipe", stderr: options.stderr ?? "pipe" });
  }

  /** Deletes taps, bridge and namespace. Idempotent; processes inside must be gone first. */
  async destroy(): Promise<void> {
    this.destroySync();
  }

  /** destroy() without the event loop, for process exit. Never throws. */
  destroySync(): void {
    if (this.destroyed) return;
    this.destroyed = true;
    for (const tap of this.taps) runHostCommandSync(["ip", "-n", this.name, "link", "del", tap]);
    runHostCommandSync(["ip", "-n", this.name, "link", "del", BRIDGE_NAME]);
    runHostCommandSync(["ip", "netns", "del", this.name]);
  }
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Removes namespaces left by launchers that died without cleaning up (killed
 * with SIGKILL): those named by our prefix whose launcher pid is gone and
 * which hold no process. Returns what it removed and what it left (busy).
 */
export function sweepStaleNamespaces(): { removed: string[]; busy: string[] } {
  const removed: string[] = [];
  const busy: string[] = [];
  if (!existsSync(NETNS_DIR)) return { removed, busy };
  for (const name of readdirSync(NETNS_DIR)) {
    const match = new RegExp(`^${NAMESPACE_PREFIX}(\\d+)-`).exec(name);
    if (!match || processExists(Number(match[1]))) continue;
    const pids = runHostCommandSync(["ip", "netns", "pids", name]).stdout.trim();
    if (pids !== "") {
      busy.push(name);
      continue;
    }
    runHostCommandSync(["ip", "netns", "del", name]);
    removed.push(name);
  }
  return { removed, busy };
}
