// The cluster's private network: a Linux network namespace holding a bridge
// and one tap per node. Nothing connects it to the host's namespace (no veth,
// no forwarding), so guest traffic can reach the other guests, dnsmasq on the
// bridge, and processes started inside the namespace — nothing else.

import { dlopen, FFIType } from "bun:ffi";
import { closeSync, existsSync, openSync } from "node:fs";
import { runHostCommand, runHostCommandSync, type HostCommandOptions, type HostCommandResult } from "./host_command.ts";

/**
 * Every namespace the launcher creates is named `${NAMESPACE_PREFIX}<cluster name>`:
 * the same name at every launch, so commands and scripts written for a
 * cluster (out/cluster/<name>/ctl) keep working. One launcher at a time
 * holds a cluster's directory, so a namespace of that name found at launch
 * is a leftover (see removeStaleNamespace).
 */
export const NAMESPACE_PREFIX = "nodecore-";
export const BRIDGE_NAME = "br0";
/** Where `ip netns add` puts named namespaces. */
export const NETNS_DIR = "/run/netns";

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

export function namespaceName(clusterName: string): string {
  return `${NAMESPACE_PREFIX}${clusterName}`;
}

export class NamespaceBusyError extends Error {
  override name = "NamespaceBusyError";
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

/**
 * Removes the namespace `name` if a launcher that died without cleaning up
 * (SIGKILL) left it behind. Its VMs died with that launcher (parent-death
 * signal); if processes still run inside, something else uses it, and this
 * throws rather than pull the network from under them. Returns whether there
 * was one to remove.
 */
export function removeStaleNamespace(name: string): boolean {
  if (!existsSync(`${NETNS_DIR}/${name}`)) return false;
  const pids = runHostCommandSync(["ip", "netns", "pids", name]).stdout.trim().split(/\s+/).filter(Boolean);
  if (pids.length > 0) throw new NamespaceBusyError(`network namespace ${name} still holds processes (pids ${pids.join(",")}); stop them, or launch under another --name`);
  deleteNamespaceSync(name);
  return true;
}

/** Deletes the namespace called name, if there is one (the kernel frees its taps and bridge). Never throws. */
export function deleteNamespaceSync(name: string): void {
  runHostCommandSync(["ip", "netns", "del", name]);
}

/** setns(2)'s flag for a network namespace. */
const CLONE_NEWNET = 0x40000000;

/**
 * Moves this process's JavaScript thread into namespace `name`, so that the
 * sockets it opens from now on reach the cluster's addresses (the fault
 * suite's owner clients talk to VMs this way, in-process). Sockets opened
 * before stay where they were, and children spawned after start inside.
 * Linux keeps a network namespace per thread: bun opens sockets on the
 * JavaScript thread, and starts threads for fetch lazily (they inherit it).
 * Returns a function that moves the thread back.
 */
export function enterNamespace(name: string): () => void {
  const libc = dlopen("libc.so.6", { setns: { args: [FFIType.i32, FFIType.i32], returns: FFIType.i32 } });
  const home = openSync("/proc/thread-self/ns/net", "r");
  const target = openSync(`${NETNS_DIR}/${name}`, "r");
  try {
    if (libc.symbols.setns(target, CLONE_NEWNET) !== 0) throw new Error(`could not enter network namespace ${name} (setns failed; root is needed)`);
  } catch (err) {
    closeSync(home);
    libc.close();
    throw err;
  } finally {
    closeSync(target);
  }
  return () => {
    try {
      if (libc.symbols.setns(home, CLONE_NEWNET) !== 0) throw new Error(`could not leave network namespace ${name} (setns failed)`);
    } finally {
      closeSync(home);
      libc.close();
    }
  };
}
