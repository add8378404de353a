// The node core proper, loaded by main.ts once PID 1's own start-up is done:
// the supervision tree with the node's root runnable, and a clean power-down
// on request. Loaded lazily so that the code only a running node needs (the
// cluster flows, gRPC, the generated API) is not on the path to PID 1's
// first console line and its pseudo file systems; etcd's client is loaded
// later still, by consensus members only (internal/consensus/etcd_client.ts).

import { join } from "node:path";
import { FW_CFG_PARAMETERS_PATH, encryptedPartition, plainDirectory } from "../../internal/cluster/mod.ts";
import { PROBE_IMAGE_PATH, runtimeCgroupName, runtimePaths, SANDBOX_IMAGE_PATH, unifiedCgroupRoot } from "../../internal/containerd/mod.ts";
import { dataPartitionDevice, mountSystemImage, type BootSelection, type StorageLayout } from "../../internal/localstorage/mod.ts";
import type { Logger } from "../../internal/log/mod.ts";
import type { ConsensusJoinTiming } from "../../internal/curator/mod.ts";
import type { BootEnd, LogTree } from "../../internal/logtree/mod.ts";
import { Network } from "../../internal/network/mod.ts";
import { supervise, type Supervisor } from "../../internal/supervisor/mod.ts";
import { becomeSubreaper } from "../../internal/sys/mod.ts";
import { dialFromOwnAddress, isLoopback } from "../../internal/rpc/mod.ts";
import type { RuntimeSetup } from "../../internal/roleserve/mod.ts";
import { nodeRoot } from "./node.ts";
import { KEEPALIVE_INTERVAL_MS, powerDown, showFatal, watchPowerRequests, type PowerAction } from "./pid1.ts";

/** How long services get to stop before the node powers down anyway. */
const SHUTDOWN_GRACE_MS = 30_000;
/** Where a VM mounts the system image (image/system.ts), when a role first needs it. */
const SYSTEM_IMAGE_DIR = "/system";
/** The Kubernetes binaries' place in the system tree (image/upstream). */
const KUBERNETES_BIN_DIR = "/kubernetes/bin";
/** The etcd of the system tree; a VM runs the initramfs's copy (ETCD_BINARY), there before any role. */
const TREE_ETCD = "/usr/bin/etcd";
/** etcdutl, in the system tree (the system image on a VM: restores need it, nothing at boot does). */
const TREE_ETCDUTL = "/usr/bin/etcdutl";
/**
 * Where the container runtime lives: on a VM, the node's own cgroup
 * hierarchy and the system image's binaries and images; for a node
 * process, the system tree's (out/system) and a cgroup named after its
 * directory (several share the host). Absent without cgroup v2.
 */
function runtimeSetup(isPid1: boolean, root: string, system: string, layout: StorageLayout, logger: Logger): RuntimeSetup | undefined {
  const cgroupRoot = unifiedCgroupRoot();
  if (cgroupRoot === undefined) {
    logger.warn("no cgroup v2 hierarchy is mounted: this node cannot run containers");
    return undefined;
  }
  const cgroup = runtimeCgroupName(isPid1 ? undefined : root);
  try {
    return {
      paths: runtimePaths(layout.data.path, layout.ephemeral.path, cgroupRoot, cgroup, system),
      probeImage: join(system, PROBE_IMAGE_PATH),
      sandboxImage: join(system, SANDBOX_IMAGE_PATH),
    };
  } catch (error) {
    logger.warn(`this node cannot run containers: ${(error as Error).message}`);
    return undefined;
  }
}

export interface RunNodeOptions {
  logger: Logger;
  logs: LogTree;
  isPid1: boolean;
  /** The root the node's storage layout hangs off: / on a VM, a directory for a node process. */
  root: string;
  layout: StorageLayout;
  /** A node process's fixed address; a VM gets its address by DHCP. */
  address: string | undefined;
  /** A node process's system tree (out/system: etcd, the runtime, Kubernetes); a VM's is its system image. */
  system: string | undefined;
  /** The system slot a VM booted (PID 1's slot choice); undefined for a node process. */
  selection: BootSelection | undefined;
}

/**
 * A node process's curator-leader waits for etcd learners, from
 * NODECORE_PROCESS_CONSENSUS_JOIN_TIMING="<catch-up ms>,<rejoin backoff ms>"
 * (test/learner_process.test.ts shortens them). A VM, as PID 1, never reads it.
 */
function processConsensusJoinTiming(logger: Logger): { consensusJoinTiming?: ConsensusJoinTiming } {
  const value = process.env.NODECORE_PROCESS_CONSENSUS_JOIN_TIMING;
  if (value === undefined) return {};
  const match = /^(\d{1,9}),(\d{1,9})$/.exec(value);
  if (!match) {
    logger.warn("NODECORE_PROCESS_CONSENSUS_JOIN_TIMING is not <catch-up ms>,<rejoin backoff ms>; the product's waits apply", { value: value.slice(0, 40) });
    return {};
  }
  return { consensusJoinTiming: { catchUpMs: Number(match[1]), rejoinBackoffMs: Number(match[2]) } };
}

export function runNode({ logger, logs, isPid1, root, layout, address, system: processSystem, selection }: RunNodeOptions): void {
  if (!isPid1) becomeSubreaper();
  // A node process shares its host: its connections to the other nodes come
  // from its own loopback address, as a VM's come from its own (internal/rpc/dial_from.ts).
  if (!isPid1 && address !== undefined && isLoopback(address)) dialFromOwnAddress(address);
  // Pending promises do not keep bun's event loop alive, and a runnable may
  // be waiting on nothing but a signal: hold the process open.
  setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
  let stopping = false;
  const system = isPid1 ? SYSTEM_IMAGE_DIR : processSystem!;
  const runtime = runtimeSetup(isPid1, root, system, layout, logger);
  const start = (): Supervisor =>
    supervise(
      nodeRoot({
        layout,
        parameterPaths: {
          fwCfg: isPid1 ? FW_CFG_PARAMETERS_PATH : `${root}/fw_cfg/parameters.pb`,
          esp: layout.esp.parameters,
          sealed: layout.esp.sealed,
        },
        storage: isPid1 ? encryptedPartition(layout, dataPartitionDevice) : plainDirectory(layout),
        network: isPid1 || !address ? { kind: "dhcp", network: new Network({ hostname: "nodecore" }) } : { kind: "fixed", address },
        etcdClientHost: isPid1 ? "loopback" : "node-address",
        ...(isPid1 ? {} : { etcdBinary: join(system, TREE_ETCD) }),
        ...(isPid1 ? {} : processConsensusJoinTiming(logger)),
        etcdutl: () => {
          if (isPid1) mountSystemImage(SYSTEM_IMAGE_DIR);
          return join(system, TREE_ETCDUTL);
        },
        kubernetesBinDir: join(system, KUBERNETES_BIN_DIR),
        ...(isPid1 ? { prepareSystemImage: () => mountSystemImage(SYSTEM_IMAGE_DIR) } : {}),
        ...(runtime ? { runtime } : {}),
        ...(isPid1 ? {} : { noKubelet: "a node process shares its host; kubelets run on VMs" }),
        ...(selection ? { selection } : {}),
        scrubEsp: isPid1,
        setClock: isPid1,
        setHostname: isPid1,
        // A node process "reboots" by starting its tree again: that is a boot too.
        bootMs: Date.now(),
        onFatal: showFatal,
        logs,
        // The tree's first runnables run inside start(), before it returns: until then there is nothing to dump.
        services: () => supervisor?.dump() ?? [],
        power: (action, why) => void stop(action === "reboot" ? "restart" : "poweroff", why),
        bootEnd: () => ending,
      }),
      { logger },
    );

  const stop = async (action: PowerAction, why: string) => {
    if (stopping) return;
    stopping = true;
    ending = { timeMs: Date.now(), cause: `${action === "restart" ? "reboot" : action}: ${why}` };
    logger.info("stopping the node", { action, why });
    await Promise.race([supervisor?.stop(), Bun.sleep(SHUTDOWN_GRACE_MS)]);
    if (!isPid1) {
      // A node running as a process has no machine to restart: it starts
      // its tree again from the same directory, as a rebooted VM would.
      if (action === "restart") {
        logger.info("starting the node again (process mode)");
        ending = undefined;
        supervisor = start();
        stopping = false;
        return;
      }
      process.exit(0);
    }
    try {
      powerDown(action, [layout.data.path, layout.esp.path], logger);
    } catch (err) {
      showFatal(`could not ${action}: ${(err as Error).message}`);
    }
  };
  let supervisor: Supervisor | undefined;
  // How this boot is ending, once stop() began: its kept logs say so (internal/logtree/boots.ts).
  let ending: BootEnd | undefined;
  supervisor = start();
  if (isPid1) watchPowerRequests((action, why) => void stop(action, why), logger);
  else {
    process.on("SIGTERM", () => void stop("poweroff", "SIGTERM"));
    process.on("SIGINT", () => void stop("poweroff", "SIGINT"));
  }
}
