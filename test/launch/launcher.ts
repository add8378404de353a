// createCluster(): sets up a cluster's network, files and node definitions;
// Cluster: starts, stops and tears them down. See mod.ts for the picture.

import { existsSync } from "node:fs";
import { join } from "node:path";
import { chooseAccelerator, cloneDisk, manifestPaths, OUT_DIR, readManifest, REPO_ROOT, type Accelerator, type AcceleratorChoice } from "../../image/mod.ts";
import { createLogger, type Logger } from "../../internal/log/mod.ts";
import { ClusterDir } from "./cluster_dir.ts";
import { DhcpServer, type StaticLease } from "./dhcp_server.ts";
import { TimeServer } from "./time_server.ts";
import { startClusterRegistry, type ContainerRegistryServer } from "./registry.ts";
import type { HostCommandOptions, HostCommandResult } from "./host_command.ts";
import { writeCtlWrapper } from "./ctl_wrapper.ts";
import { deleteNamespaceSync, namespaceName, NetworkNamespace, nodeAddress, removeStaleNamespace, subnetOf } from "./network_namespace.ts";
import { NodeVm } from "./node_vm.ts";
import { encodeNodeParameters, loadOrCreateOwnerKey, loadOrCreateStorageTestKey, type NodeParametersSpec, type OwnerKey } from "./node_parameters.ts";
import { registerTeardown } from "./teardown.ts";
import { sizeVms, thisHost } from "./vm_sizing.ts";

export const DEFAULT_CLUSTER_NAME = "dev";
/** Cluster directories live here (gitignored), one per cluster name. */
export const CLUSTER_DIRS = "out/cluster";
export const DEFAULT_NODE_COUNT = 1;
export const DEFAULT_SUBNET_INDEX = 0;
/** Cluster names become file and namespace names. */
export const CLUSTER_NAME = /^[a-z0-9][a-z0-9-]{0,23}$/;

export interface NodeSpec {
  /** Default: bootstrap for node 1; nodes 2..N need register parameters (not available yet). */
  parameters?: NodeParametersSpec;
  /** Default: the cluster's storageTestKey option. */
  storageTestKey?: boolean;
}

export interface ClusterOptions {
  /** Names the cluster directory and the namespace (default "dev"). */
  name?: string;
  /** How many nodes (default 1), or one spec per node. */
  nodes?: number | readonly NodeSpec[];
  /** Default: out/cluster/<name>. */
  dir?: string;
  /**
   * Start from empty disks, keys and logs (default true). false reuses what
   * the directory holds (disks, owner key, storage test keys) and adds what is missing.
   */
  fresh?: boolean;
  /**
   * Also hand each node a random 32-byte key as fw_cfg
   * dev.nodecore/storage-test-key, kept in the cluster directory so that
   * reboots reuse it (default false). The node core read it as its data
   * partition key until the cluster flows took over deriving that key
   * (commit be2a7d2); today's node ignores it. Kept for images from before.
   */
  storageTestKey?: boolean;
  /** Do not echo consoles to the terminal (they still go to <node>.console.log). */
  quiet?: boolean;
  /** Memory per VM (default: sized to the host, vm_sizing.ts). */
  memoryMiB?: number;
  /** vCPUs per VM (default: sized to the host, vm_sizing.ts). */
  cpus?: number;
  /** KVM or TCG (default: probed, image/accel.ts); "kvm" fails the launch where KVM cannot run a guest. */
  accel?: Accelerator;
  /** The kernel command line (default: the image's, slot a's). */
  cmdline?: string;
  /** Where the built image is (default out/image). */
  imageDir?: string;
  /** The cluster network is 10.77.<subnetIndex>.0/24 inside the namespace (default 0). */
  subnetIndex?: number;
  logger?: Logger;
}

/** Node i's MAC: locally administered qemu prefix, then subnet and index. */
export function nodeMac(subnetIndex: number, index: number): string {
  const hex = (n: number) => n.toString(16).padStart(2, "0");
  return `52:54:00:77:${hex(subnetIndex)}:${hex(index)}`;
}

function nodeSpecs(nodes: ClusterOptions["nodes"]): readonly NodeSpec[] {
  if (typeof nodes === "object") return nodes;
  const count = nodes ?? DEFAULT_NODE_COUNT;
  if (!Number.isInteger(count) || count < 1) throw new RangeError(`node count must be a positive integer, got ${count}`);
  return Array.from({ length: count }, () => ({}));
}

/** Node 1 bootstraps; the others register once formCluster() has fetched their parameters. */
function defaultParameters(index: number): NodeParametersSpec {
  return index === 1 ? { kind: "bootstrap" } : { kind: "register-later" };
}

export class Cluster {
  private closed = false;
  private readonly unregister: () => void;

  constructor(
    readonly name: string,
    /** KVM or TCG, and why: the e2e and the benches print it beside their figures. */
    readonly accel: AcceleratorChoice,
    readonly dir: ClusterDir,
    readonly ns: NetworkNamespace,
    readonly owner: OwnerKey,
    readonly nodes: readonly NodeVm[],
    private dhcp: DhcpServer | undefined,
    private readonly logger: Logger,
    /** The network's NTP server (announced by DHCP), on the bridge's address. */
    readonly timeServer: TimeServer | undefined = undefined,
    /** The network's container registry (TLS from its own CA, a password), on the bridge's address, holding the images the tests and the README pull. */
    readonly registry: ContainerRegistryServer | undefined = undefined,
  ) {
    this.unregister = registerTeardown({ label: `cluster ${name}`, close: () => this.close(), closeSync: () => this.closeSync() });
  }

  /** True once close() has begun. */
  get closing(): boolean {
    return this.closed;
  }

  node(name: string): NodeVm {
    const node = this.nodes.find((n) => n.name === name);
    if (!node) throw new Error(`no node ${name} in cluster ${this.name} (have ${this.nodes.map((n) => n.name).join(", ")})`);
    return node;
  }

  /** Boots every stopped node. */
  async start(): Promise<void> {
    for (const node of this.nodes) if (node.state === "stopped") await node.start();
  }

  /** Runs a host command inside the cluster's network namespace, where the nodes' addresses are reachable. */
  async exec(argv: readonly string[], options: HostCommandOptions = {}): Promise<HostCommandResult> {
    return this.ns.run(argv, options);
  }

  /** The argv prefix that runs a command inside the namespace (for processes the caller manages). */
  commandInNamespace(argv: readonly string[]): string[] {
    return this.ns.command(argv);
  }

  /**
   * Tears everything down: VMs (clean poweroff first if asked, else killed),
   * dnsmasq, taps, bridge, namespace. The cluster directory stays for
   * inspection. Idempotent.
   */
  async close(options: { clean?: boolean } = {}): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await Promise.allSettled(this.nodes.map((n) => (options.clean ? n.stop({ clean: true }).catch(() => n.kill()) : n.kill())));
    await this.dhcp?.stop();
    this.dhcp = undefined;
    await this.timeServer?.stop();
    await this.registry?.stop();
    await this.ns.destroy();
    this.dir.release();
    this.unregister();
    this.logger.info(`cluster ${this.name} torn down`, { namespace: this.ns.name });
  }

  private closeSync(): void {
    if (this.closed) return;
    this.closed = true;
    for (const node of this.nodes) node.killSync();
    this.dhcp?.stopSync();
    this.timeServer?.stopSync();
    this.registry?.stopSync();
    // Deleting the name is enough: the kernel frees the namespace (and the
    // taps in it) once the killed processes inside are gone.
    this.ns.destroySync();
    this.dir.release();
  }
}

/**
 * Prepares a cluster: namespace with bridge and taps, dnsmasq with a static
 * lease per node, and per node a disk copy, parameters and storage test key.
 * No node runs yet: call cluster.start() or node.start().
 */
export async function createCluster(options: ClusterOptions = {}): Promise<Cluster> {
  const logger = options.logger ?? createLogger("launch");
  const name = options.name ?? DEFAULT_CLUSTER_NAME;
  if (!CLUSTER_NAME.test(name)) throw new Error(`cluster name ${JSON.stringify(name)} must match ${CLUSTER_NAME.source}`);
  const specs = nodeSpecs(options.nodes);
  const parameterSpecs = specs.map((s, i) => s.parameters ?? defaultParameters(i + 1));
  const imageDir = options.imageDir ?? join(REPO_ROOT, OUT_DIR);
  const manifest = readManifest(imageDir);
  const image = manifestPaths(manifest, imageDir);
  for (const file of Object.values(image)) if (!existsSync(file)) throw new Error(`image file ${file} is missing: run bun image/build.ts`);
  // Before anything is set up: a --accel kvm that cannot be honoured stops here.
  const accel = await chooseAccelerator({ kernel: image.kernel, asked: options.accel });
  logger.info(`qemu runs the nodes with ${accel.accel.toUpperCase()}: ${accel.reason}`);

  const dir = ClusterDir.open(options.dir ?? join(REPO_ROOT, CLUSTER_DIRS, name), { fresh: options.fresh ?? true });
  const subnetIndex = options.subnetIndex ?? DEFAULT_SUBNET_INDEX;
  const subnet = subnetOf(subnetIndex);
  const nsName = namespaceName(name);
  let creatingNs = false;
  let ns: NetworkNamespace | undefined;
  let dhcp: DhcpServer | undefined;
  let timeServer: TimeServer | undefined;
  let registry: ContainerRegistryServer | undefined;
  // Until the Cluster exists to own them, a Ctrl-C must still take down
  // what is set up so far (no node runs yet). The namespace goes by name
  // when the signal comes while NetworkNamespace.create() runs, before ns is set.
  const undo = () => {
    dhcp?.stopSync();
    timeServer?.stopSync();
    registry?.stopSync();
    if (ns) ns.destroySync();
    else if (creatingNs) deleteNamespaceSync(nsName);
    dir.release();
  };
  const unregister = registerTeardown({ label: `cluster ${name} (preparing)`, close: async () => undo(), closeSync: undo });
  try {
    const owner = loadOrCreateOwnerKey(dir.ownerKey);
    if (removeStaleNamespace(nsName)) logger.info("removed the network namespace an earlier launch left behind", { namespace: nsName });
    creatingNs = true;
    ns = await NetworkNamespace.create(nsName, subnet);
    writeCtlWrapper(dir.ctlWrapper, { cluster: name, namespace: ns.name, config: dir.ctlConfig });
    const nodes: NodeVm[] = [];
    const leases: StaticLease[] = [];
    const sizing = sizeVms(specs.length, thisHost(), { ...(options.cpus !== undefined ? { cpus: options.cpus } : {}), ...(options.memoryMiB !== undefined ? { memoryMiB: options.memoryMiB } : {}) });
    logger.info(sizing.summary);
    for (const warning of sizing.warnings) logger.warn(warning);
    for (const [i, spec] of specs.entries()) {
      const index = i + 1;
      const nodeName = `node${index}`;
      const files = dir.node(nodeName);
      const mac = nodeMac(subnetIndex, index);
      const address = nodeAddress(subnet, index);
      const tap = `tap${index}`;
      await ns.addTap(tap);
      if (!existsSync(files.disk)) await cloneDisk(image.disk, files.disk);
      const parameters = encodeNodeParameters(parameterSpecs[i]!, owner);
      if (parameters) await Bun.write(files.parameters, parameters);
      const withKey = spec.storageTestKey ?? options.storageTestKey ?? false;
      if (withKey) loadOrCreateStorageTestKey(files.storageTestKey);
      leases.push({ mac, address, hostname: nodeName });
      nodes.push(
        new NodeVm({
          name: nodeName,
          index,
          mac,
          address,
          tap,
          files,
          // Slot a's build, as the disk template installs it: the firmware's
          // fixed entry. The node kexecs another slot if its disk's boot
          // record names one (internal/update/select.ts).
          kernel: image.kernel,
          initramfs: image.initramfs,
          cmdline: options.cmdline ?? manifest.cmdline,
          hasParameters: parameters !== undefined || parameterSpecs[i]!.kind === "register-later",
          hasStorageTestKey: withKey,
          // Node 1 bootstraps, and the first node is the Kubernetes
          // controller; every node of a launched cluster is a worker.
          memoryMiB: index === 1 ? sizing.controllerMemoryMiB : sizing.workerMemoryMiB,
          cpus: index === 1 ? sizing.controllerCpus : sizing.workerCpus,
          accel: accel.accel,
          echo: !(options.quiet ?? false),
          ns,
          logger,
        }),
      );
    }
    timeServer = await TimeServer.start(ns, { address: subnet.bridgeAddress, network: `${subnet.prefix}.0/24`, ...dir.timeServerFiles });
    dhcp = await DhcpServer.start(ns, { leaseFile: dir.dhcpLeases, logFile: dir.dhcpLog, leases, ntpServer: true });
    registry = await startClusterRegistry(ns, join(dir.path, "registry"));
    logger.info(`cluster ${name} prepared`, { namespace: ns.name, subnet: `${subnet.prefix}.0/24`, nodes: nodes.length, dir: dir.path, registry: registry.host });
    return new Cluster(name, accel, dir, ns, owner, nodes, dhcp, logger, timeServer, registry);
  } catch (err) {
    undo();
    throw err;
  } finally {
    unregister();
  }
}
