// The enrolment runnable: decides how this node becomes part of a cluster,
// runs that flow, and publishes the node's membership for the role server.

import type { Value } from "../event/mod.ts";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { SealedConfigurationError, type StorageLayout } from "../localstorage/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { NodeCredentials } from "./credentials.ts";
import type { DataStorage } from "./data_storage.ts";
import { decideEnrolment, type EnrolmentDecision } from "./enrolment_decision.ts";
import { bootstrapCluster, loadPendingBootstrap, type Enrolled, type PendingBootstrap } from "./flow_bootstrap.ts";
import { joinCluster } from "./flow_join.ts";
import { registerNode } from "./flow_register.ts";
import { loadPendingRestore, restoreCluster, type PendingRestore } from "./flow_restore.ts";
import { existsSync, rmSync } from "node:fs";
import { ETCD_BINARY, etcdutlBeside } from "../consensus/mod.ts";
import { ParametersError, type ParameterPaths } from "./node_parameters.ts";
import { create, fromBinary } from "@bufbuild/protobuf";
import { readFileSync } from "node:fs";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { ClusterDirectorySchema } from "../../proto/gen/common/common_pb.ts";
import { rawPublicKey } from "../pki/mod.ts";
import { loadTimeServers, saveTimeServers } from "../clock/mod.ts";
import type { Logger } from "../log/mod.ts";
import type { SnapshotStateReader } from "../backup/mod.ts";

/** What the role server gets once the node is part of a cluster. */
export interface ClusterMembership {
  credentials: NodeCredentials;
  /** The node's own address. */
  address: string;
  /** Curators known at enrolment; the role server keeps this fresh from the cluster. */
  directory: ClusterDirectory;
  /** Set when this node still has to create the cluster (first boot of the first node). */
  pendingBootstrap?: PendingBootstrap;
  /** Set when this node still has to start the cluster from a backup's snapshot (flow_restore.ts). */
  pendingRestore?: PendingRestore;
  /** The cluster's half of the data key (kept on the ESP only while the node is a consensus member). */
  clusterUnlockKey: Uint8Array;
}

/** Where this node stands on its way into a cluster. */
export type EnrolmentState =
  | { phase: "deciding" }
  /** Something only an operator can fix (bad parameters); the node stays up to be inspected. */
  | { phase: "fatal"; message: string }
  | { phase: "enrolling"; decision: EnrolmentDecision["kind"] }
  | { phase: "member"; decision: EnrolmentDecision["kind"]; nodeId: string };

export interface EnrolmentOptions {
  layout: StorageLayout;
  paths: ParameterPaths & { sealed: string };
  storage: DataStorage;
  /** Resolves with this node's address once it has one. */
  address: (signal: AbortSignal) => Promise<string>;
  /** Written by enrolment. */
  state: Value<EnrolmentState>;
  membership: Value<ClusterMembership>;
  /** Shows an operator-facing fatal message (PID 1: a banner on the console). */
  onFatal: (message: string) => void;
  curatorPort?: number;
  /** The etcd binary (default: the node image's); a restore reads its snapshot with it. */
  etcdBinary?: string;
  /** How a restore reads what its snapshot holds: the curator's decoder, handed in from cmd/init (this package sits below the curator). */
  snapshotState: SnapshotStateReader;
  /** Where etcdutl is, mounting what it takes (default: beside etcd). */
  etcdutl?: () => string;
  /** Overwrites the ESP's free space (a VM's FAT ESP keeps deleted files' bytes); absent for a node process. */
  scrubEsp?: () => Promise<void>;
  /**
   * The boot gate (internal/clock): resolves once the clock synced, there is
   * nothing to sync with, or the gate's timeout ran out, saying which. Waited
   * for before the node's first TLS handshake: the curator's certificates
   * live an hour, and a clock hours off would fail every one.
   */
  timeGate?: (signal: AbortSignal) => Promise<"synced" | "no-servers" | "timed-out">;
  /**
   * Written once the parameters were read: the NTP servers they name (kept
   * on the ESP for later boots, which read them from there). Empty when
   * there are none, or the parameters could not be read.
   */
  timeServers?: Value<readonly string[]>;
}

/**
 * The NTP servers to sync with besides the DHCP lease's: the parameters'
 * (kept on the ESP for later boots), or at a join what was kept. A kept
 * list that cannot be written is logged, never fatal.
 */
function configuredTimeServers(decision: EnrolmentDecision, path: string, logger: Logger): string[] {
  if (decision.kind === "join") return loadTimeServers(path);
  const servers = [...decision.raw.timeServers];
  try {
    saveTimeServers(path, servers);
  } catch (err) {
    logger.warn("could not keep the parameters' time servers for later boots", { error: (err as Error).message });
  }
  return servers;
}

export function enrolmentRunnable(options: EnrolmentOptions): Runnable {
  return async (ctx) => {
    options.state.set({ phase: "deciding" });
    let decision: EnrolmentDecision;
    try {
      decision = decideEnrolment(options.paths, ctx.logger);
    } catch (err) {
      options.timeServers?.set([]);
      if (!(err instanceof ParametersError || err instanceof SealedConfigurationError)) throw err;
      return fatal(err.message);
    }
    options.timeServers?.set(configuredTimeServers(decision, options.layout.esp.timeServers, ctx.logger));
    const address = await options.address(ctx.signal);
    if (options.timeGate) {
      const gate = await options.timeGate(ctx.signal);
      if (gate === "synced") ctx.logger.info("the clock is synced; enrolling");
      if (gate === "timed-out") ctx.logger.warn("the clock did not sync in time; enrolling anyway (a clock far off fails TLS handshakes until it syncs)");
    }
    options.state.set({ phase: "enrolling", decision: decision.kind });
    const common = { layout: options.layout, storage: options.storage, logger: ctx.logger, signal: ctx.signal, curatorPort: options.curatorPort };

    let enrolled: Enrolled;
    let directory: ClusterDirectory;
    try {
      switch (decision.kind) {
        case "bootstrap":
          enrolled = await bootstrapCluster({ ...common, ownerPublicKey: decision.ownerPublicKey, unlockShareThreshold: decision.unlockShareThreshold, address });
          directory = create(ClusterDirectorySchema, { nodes: [{ publicKey: rawPublicKey(enrolled.credentials.publicKey), addresses: [{ host: address }] }] });
          break;
        case "register": {
          const register = decision.raw.cluster.case === "clusterRegister" ? decision.raw.cluster.value : undefined;
          directory = register?.clusterDirectory ?? create(ClusterDirectorySchema);
          enrolled = await registerNode({ ...common, ticket: decision.ticket, caCertificate: decision.caCertificate, directory });
          break;
        }
        case "restore": {
          const etcd = options.etcdBinary ?? ETCD_BINARY;
          enrolled = await restoreCluster({
            ...common,
            ownerPublicKey: decision.ownerPublicKey,
            snapshot: decision.snapshot,
            caCertificate: decision.caCertificate,
            address,
            etcd,
            etcdutl: options.etcdutl?.() ?? etcdutlBeside(etcd),
            snapshotState: options.snapshotState,
            forgetParameters: () => forgetRestoreParameters(decision.source),
          });
          directory = create(ClusterDirectorySchema, { nodes: [{ publicKey: rawPublicKey(enrolled.credentials.publicKey), addresses: [{ host: address }] }] });
          break;
        }
        case "join":
          enrolled = await joinCluster({ ...common, sealed: decision.sealed, ownAddress: address });
          directory = enrolled.directory ?? decision.sealed.clusterDirectory ?? create(ClusterDirectorySchema);
          // A restore that stopped before it deleted its parameters finishes that now.
          if (existsSync(options.paths.esp) && isRestore(options.paths.esp)) await forgetRestoreParameters("esp");
          break;
        default: {
          const unreachable: never = decision;
          throw new Error(`unknown enrolment decision ${JSON.stringify(unreachable)}`);
        }
      }
    } catch (err) {
      if (err instanceof ParametersError) return fatal(err.message);
      throw err;
    }

    const { credentials, clusterUnlockKey } = enrolled;
    const pendingBootstrap = loadPendingBootstrap(options.layout);
    const pendingRestore = loadPendingRestore(options.layout);
    options.membership.set({ credentials, address, directory, clusterUnlockKey, ...(pendingBootstrap ? { pendingBootstrap } : {}), ...(pendingRestore ? { pendingRestore } : {}) });
    options.state.set({ phase: "member", decision: decision.kind, nodeId: credentials.nodeId });
    ctx.logger.info("this node is part of the cluster", { node: credentials.nodeId, via: decision.kind });
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);

    /**
     * Deletes restore parameters from the ESP and overwrites the freed
     * space: they hold every key of the cluster. Parameters given through
     * qemu fw_cfg live on the host, which the owner cleans up.
     */
    async function forgetRestoreParameters(source: "esp" | "fw_cfg") {
      if (source !== "esp") {
        ctx.logger.warn("the restore's parameters came through fw_cfg: remove them from the host, they hold every key of the cluster");
        return;
      }
      rmSync(options.paths.esp, { force: true });
      await options.scrubEsp?.();
      ctx.logger.info("deleted the restore's parameters from the ESP");
    }

    function fatal(message: string) {
      // Retrying cannot help: the parameters are what they are until an
      // operator fixes them. Say so once, clearly, and stay up.
      ctx.logger.error("cannot enrol: bad node parameters", { error: message });
      options.state.set({ phase: "fatal", message });
      options.onFatal(message);
      ctx.signalDone();
    }
  };
}

/** Whether the parameters file at `path` asks for a restore (an unreadable one does not). */
function isRestore(path: string): boolean {
  try {
    return fromBinary(NodeParametersSchema, readFileSync(path)).cluster.case === "clusterRestore";
  } catch {
    return false;
  }
}
