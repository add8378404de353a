// The launcher's command line (`bun run cluster ...`), parsed without side
// effects so that every mistake can be tested: the result is the options, a
// request for help, or one line saying what is wrong. Hand-written rather
// than node:util parseArgs, whose mistakes are TypeErrors with messages
// about positional arguments and ambiguity that do not name the fix.

import { ACCELERATORS, type Accelerator } from "../../image/mod.ts";
import { CLUSTER_NAME, DEFAULT_CLUSTER_NAME } from "./launcher.ts";

/** A cluster of three: every node a consensus member, as issue #5 asks of the main command. */
export const DEFAULT_NODES = 3;
/** Every launched node becomes an etcd voter, and etcd advises against more than seven members. */
export const MAX_NODES = 7;
/** Node processes: the first PROCESS_CONSENSUS_NODES are etcd voters, the rest plain nodes. */
export const MAX_PROCESS_NODES = 100;
export const PROCESS_CONSENSUS_NODES = 3;
/** TCG is slow and the host may be busy: generous, per step. */
export const DEFAULT_UP_TIMEOUT_S = 300;
/** setTimeout holds at most 2^31-1 ms (about 24 days); a day is more than any step needs. */
export const MAX_TIMEOUT_S = 86_400;
/** Below this the node's kernel and initramfs do not fit. */
export const MIN_MEMORY_MIB = 256;
export const MAX_MEMORY_MIB = 65_536;
/** qemu's own bound on vCPUs is far higher; a node needs no more than this. */
export const MAX_CPUS = 64;

export const USAGE = [
  "usage: bun run cluster [--nodes N] [--name dev] [--verbose] [--keep] [--timeout seconds] [--cpus N] [--memory MiB] [--accel kvm|tcg] [--no-build] [--image-dir dir] [--kubernetes dir]",
  "       bun run cluster --processes [--nodes N] [--name dev] [--timeout seconds] [--no-build]",
  `  --nodes N     how many nodes, 1..${MAX_NODES} VMs (default ${DEFAULT_NODES}), each with the consensus role;`,
  `                with --processes 1..${MAX_PROCESS_NODES}, the first ${PROCESS_CONSENSUS_NODES} with the consensus role`,
  "  --processes   node processes on loopback instead of VMs: the same out/init, plain directories for",
  "                disks, UNENCRYPTED, FOR DEVELOPMENT; starts in seconds, and scales to many nodes",
  `  --name name   the cluster's name: out/cluster/<name>/ and network namespace nodecore-<name> (default ${DEFAULT_CLUSTER_NAME})`,
  "  --verbose     echo the node consoles (always in out/cluster/<name>/<node>.console.log)",
  "  --keep        boot the disks of the last launch again instead of fresh ones",
  `  --timeout s   deadline of each formation step (default ${DEFAULT_UP_TIMEOUT_S})`,
  "  --cpus N      vCPUs per node (default: this host's cores shared among the nodes, 1 to 4 each)",
  "  --memory MiB  memory per node (default: 2560 for node1, 1536 for the others, less if the host has less)",
  "  --accel a     kvm or tcg (default: KVM when it can boot a guest on this host, checked once per",
  "                host boot; software emulation otherwise)",
  "  --no-build    do not bring out/ up to date first",
  "  --image-dir   boot the image in dir instead of out/image (with --no-build: one built elsewhere)",
  "  --kubernetes  build the Kubernetes server binaries in dir (kube-apiserver, kube-controller-manager,",
  "                kube-scheduler, kubelet) into the image; without them nodes say they are missing",
  "",
].join("\n");

export interface LaunchOptions {
  nodes: number;
  /** Node processes on loopback instead of VMs. */
  processes: boolean;
  name: string;
  verbose: boolean;
  keep: boolean;
  timeoutMs: number;
  memoryMiB: number | undefined;
  cpus: number | undefined;
  /** --accel: undefined lets the launcher probe (image/accel.ts). */
  accel: Accelerator | undefined;
  build: boolean;
  imageDir: string | undefined;
  /** The user's Kubernetes server binaries, built into the image. */
  kubernetesDir: string | undefined;
}

export type LauncherArgs = { kind: "launch"; options: LaunchOptions } | { kind: "help" } | { kind: "error"; message: string };

const FLAGS = ["verbose", "keep", "no-build", "help", "processes"] as const;
const VALUED = ["nodes", "name", "timeout", "cpus", "memory", "accel", "image-dir", "kubernetes"] as const;
type Flag = (typeof FLAGS)[number];
type Valued = (typeof VALUED)[number];

const isFlag = (name: string): name is Flag => (FLAGS as readonly string[]).includes(name);
const isValued = (name: string): name is Valued => (VALUED as readonly string[]).includes(name);

class ArgumentError extends Error {
  override name = "ArgumentError";
}

function wholeNumber(option: string, value: string, min: number, max: number): number {
  const n = /^\d+$/.test(value) ? Number(value) : NaN;
  if (!(n >= min && n <= max)) throw new ArgumentError(`${option} must be a whole number from ${min} to ${max}, got '${value}'`);
  return n;
}

function nodesMessage(value: string): string {
  return `--nodes must be a whole number from 1 to ${MAX_NODES} (up to ${MAX_PROCESS_NODES} with --processes), got '${value}'`;
}

function checkValue(option: Valued, value: string): void {
  switch (option) {
    case "nodes":
      // The bound depends on --processes: checked again once every option is read.
      if (!/^\d+$/.test(value) || Number(value) < 1 || Number(value) > MAX_PROCESS_NODES) throw new ArgumentError(nodesMessage(value));
      return;
    case "name":
      if (!CLUSTER_NAME.test(value)) throw new ArgumentError(`--name must be 1 to 24 lowercase letters, digits and dashes, starting with a letter or digit, got '${value}'`);
      return;
    case "timeout":
      wholeNumber("--timeout", value, 1, MAX_TIMEOUT_S);
      return;
    case "memory":
      wholeNumber("--memory", value, MIN_MEMORY_MIB, MAX_MEMORY_MIB);
      return;
    case "cpus":
      wholeNumber("--cpus", value, 1, MAX_CPUS);
      return;
    case "accel":
      if (!(ACCELERATORS as readonly string[]).includes(value)) throw new ArgumentError(`--accel must be one of ${ACCELERATORS.join(", ")}, got '${value}'`);
      return;
    case "image-dir":
    case "kubernetes":
      if (value === "") throw new ArgumentError(`--${option} must not be empty`);
      return;
    default: {
      const unreachable: never = option;
      throw new ArgumentError(`unknown option '--${unreachable}'`);
    }
  }
}

/** Parses `bun run cluster`'s arguments (process.argv.slice(2)); a mistake is a value, not an exception. */
export function parseLauncherArgs(argv: readonly string[]): LauncherArgs {
  const flags = new Set<Flag>();
  const values = new Map<Valued, string>();
  try {
    for (let i = 0; i < argv.length; i++) {
      const arg = argv[i]!;
      if (arg === "-h") {
        flags.add("help");
        continue;
      }
      if (!arg.startsWith("--") || arg === "--") throw new ArgumentError(`unexpected argument '${arg}' (options start with --; see --help)`);
      const eq = arg.indexOf("=");
      const name = arg.slice(2, eq < 0 ? undefined : eq);
      const inline = eq < 0 ? undefined : arg.slice(eq + 1);
      if (isFlag(name)) {
        if (inline !== undefined) throw new ArgumentError(`--${name} takes no value, got '${arg}'`);
        flags.add(name);
      } else if (isValued(name)) {
        // "--nodes --verbose" forgot the value; "--nodes -1" gave a wrong one.
        const value = inline ?? (argv[i + 1]?.startsWith("--") ? undefined : argv[++i]);
        if (value === undefined) throw new ArgumentError(`--${name} needs a value (see --help)`);
        checkValue(name, value);
        values.set(name, value);
      } else {
        throw new ArgumentError(`unknown option '${arg}' (see --help)`);
      }
    }
  } catch (err) {
    if (err instanceof ArgumentError) return { kind: "error", message: err.message };
    throw err;
  }
  if (flags.has("help")) return { kind: "help" };
  const processes = flags.has("processes");
  const nodes = Number(values.get("nodes") ?? DEFAULT_NODES);
  if (!processes && nodes > MAX_NODES) return { kind: "error", message: nodesMessage(String(nodes)) };
  if (processes) {
    const vmOnly = [...(["keep", "verbose"] as const).filter((f) => flags.has(f)), ...(["cpus", "memory", "accel", "image-dir", "kubernetes"] as const).filter((v) => values.has(v))];
    if (vmOnly.length > 0) return { kind: "error", message: `--${vmOnly[0]} is for VMs; node processes do without it (drop it, or drop --processes)` };
  }
  if (values.has("kubernetes") && flags.has("no-build")) return { kind: "error", message: "--kubernetes builds the binaries into the image; it needs a build (drop --no-build)" };
  const memory = values.get("memory");
  const cpus = values.get("cpus");
  return {
    kind: "launch",
    options: {
      nodes,
      processes,
      name: values.get("name") ?? DEFAULT_CLUSTER_NAME,
      verbose: flags.has("verbose"),
      keep: flags.has("keep"),
      timeoutMs: Number(values.get("timeout") ?? DEFAULT_UP_TIMEOUT_S) * 1000,
      memoryMiB: memory === undefined ? undefined : Number(memory),
      cpus: cpus === undefined ? undefined : Number(cpus),
      accel: values.get("accel") as Accelerator | undefined,
      build: !flags.has("no-build"),
      imageDir: values.get("image-dir"),
      kubernetesDir: values.get("kubernetes"),
    },
  };
}
