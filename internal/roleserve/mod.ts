// Package roleserve: the Role Server, after Monogon's roleserve.
//
// It runs on every node once the node is part of a cluster, and runs the
// services the cluster's roles call for. The first node of a cluster and
// every later node take the same path: enrolment hands over a membership,
// and from then on only roles decide what runs.
//
//   ┌────────────────────┐  membership   ┌───────────────────────────────────────────────┐
//   │ Cluster Enrolment  │──────────────▶│                  Role Server                  │
//   │ (internal/cluster) │               │                                               │
//   └────────────────────┘               │  controlplane ──▶ localCurator ─┐             │
//                                        │   (etcd + curator when the      ▼             │
//                                        │    consensus role says so)  curatorconnection │
//                                        │                  directory ──▶ (local first,  │
//                                        │                      ▲          then remote)  │
//                                        │  rolefetch ──────────┴── roles, nodes ◀─ Watch ┤
//                                        │  statuspush ── address, curator, services ───▶│ curator
//                                        │  heartbeat ── an update every 5 s, a stream ──▶│ (leader)
//                                        │  kubernetes ── controller (beside etcd),       │
//                                        │    containerd, the mesh (internal/clusternet); │
//                                        │    binaries present? ─▶ services               │
//                                        │  sealed ── directory, cold-start key ─▶ ESP    │
//                                        │  coldstart ── shares of the cluster half ─▶    │ other members'
//                                        │      ShareHolder; join certificate ─▶ ESP       │ share holders
//                                        │  backups ── on the node the schedule names:    │
//                                        │      snapshot ─▶ /data/backups, proven by a    │
//                                        │      throwaway restore (worker_backups.ts)     │
//                                        └───────────────────────────────────────────────┘
//
// Workers talk only through watchable values (internal/event). Each worker
// file says which values it reads and which it writes.
//
// Invariants:
//  - Roles come only from the cluster (the node's record, via Watch). A
//    node that remembers an etcd membership starts its control plane before
//    roles are known, so that a cluster whose every node restarted can come
//    back at all.
//  - A role change restarts only the worker it concerns (RestartRequest).
//  - Status is pushed when it changes, not on a timer; liveness is the
//    heartbeat stream's job.
//  - A recovery from a lost quorum (consensus_recovery.ts) and a restore
//    from a backup are recorded on the data partition before they act, and
//    finish on the control plane's next start if cut short.

import type { ClusterDirectory, NodeRoles, NodeStatus } from "../../proto/gen/common/common_pb.ts";
import type { SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import type { ConsensusJoinTiming } from "../curator/mod.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { Value } from "../event/mod.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";
import { ServiceBoard } from "./service_status.ts";
import { controlPlaneWorker, type LocalConsensus, type LocalCurator } from "./worker_controlplane.ts";
import { ConsensusRecovery } from "./consensus_recovery.ts";
import { backupsWorker } from "./worker_backups.ts";
import { ETCD_BINARY, etcdutlBeside } from "../consensus/mod.ts";
import type { NodeMetrics } from "../metrics/mod.ts";
import type { DataStorage } from "../cluster/mod.ts";
import { kubernetesWorker, type RuntimeSetup } from "./worker_kubernetes.ts";
import { curatorConnectionWorker } from "./worker_curatorconnection.ts";
import { roleFetchWorker } from "./worker_rolefetch.ts";
import { statusPushWorker, type SlotStatus } from "./worker_statuspush.ts";
import { heartbeatWorker } from "./worker_heartbeat.ts";
import { sealedUpdateWorker } from "./worker_sealed.ts";
import { coldStartWorker } from "./worker_coldstart.ts";
import type { ImageStore } from "../containerd/mod.ts";

export { withCurator, type CuratorConnection, type CuratorClient } from "./curator_connection.ts";

/** The deadline of the call that hands a backup's status to the curator leader. */
const BACKUP_REPORT_TIMEOUT_MS = 10_000;
export { nodeCallReporter, type NodeManagementReport } from "./report_calls.ts";
export { ServiceBoard } from "./service_status.ts";
export { controlPlaneWorker, type LocalConsensus, type LocalCurator, type ControlPlaneOptions } from "./worker_controlplane.ts";
export { curatorConnectionWorker, type CuratorConnectionOptions } from "./worker_curatorconnection.ts";
export { roleFetchWorker, type RoleFetchOptions } from "./worker_rolefetch.ts";
export { statusPushWorker, type StatusPushOptions, type SlotStatus } from "./worker_statuspush.ts";
export { heartbeatWorker, type HeartbeatOptions } from "./worker_heartbeat.ts";
export { sealedUpdateWorker, type SealedUpdateOptions } from "./worker_sealed.ts";
export { coldStartWorker, type ColdStartOptions } from "./worker_coldstart.ts";
export { kubernetesWorker, DEFAULT_KUBERNETES_BIN_DIR, type KubernetesOptions, type RuntimeSetup } from "./worker_kubernetes.ts";
export { loadEtcdMemberState, clearEtcdMember, type EtcdMemberState } from "./etcd_member_state.ts";
export { ConsensusRecovery, QUORUM_PROBE_MS, type RecoveryPlan, type RunningMember } from "./consensus_recovery.ts";

export interface RoleServerOptions {
  layout: StorageLayout;
  membership: Value<ClusterMembership>;
  /** Where etcd's client port listens: loopback on a VM, the node's address when nodes share a host. */
  etcdClientHost: (membership: ClusterMembership) => string;
  /** The etcd binary (default: the node image's, /usr/bin/etcd). */
  etcdBinary?: string;
  /** The curator leader's waits for etcd learners (default: the product's); process tests shorten them. */
  consensusJoinTiming?: ConsensusJoinTiming;
  /** Where etcdutl is, mounting what it takes (default: beside etcd); a restore needs it. */
  etcdutl?: () => string;
  /** The node's data storage: a scheduled backup proves its cluster half opens it. */
  storage?: DataStorage;
  kubernetesBinDir?: string;
  /** Makes the system image's files available to the Kubernetes roles, their binaries and the container runtime (a VM mounts it); throws, naming what is missing. */
  prepareSystemImage?: () => void;
  /** The container runtime's place (Kubernetes worker role); absent where the node cannot run containers. */
  runtime?: RuntimeSetup;
  /** Why this node runs no kubelet, if it runs none (a node process: see KubernetesOptions.noKubelet). */
  noKubelet?: string;
  /** The node's own DNS resolvers (its DHCP lease's), for names outside the cluster. */
  resolvers?: (signal: AbortSignal) => Promise<string[]>;
  curatorPort?: number;
  shareHolderPort?: number;
  /** When this boot of the node began (ms since the epoch); default: when the role server was made. */
  bootMs?: number;
  /**
   * Overwrites the ESP's free space (on a VM, where the ESP is a FAT
   * partition whose freed clusters keep old file contents); absent for a
   * node process, whose "ESP" is a directory on the host.
   */
  scrubEsp?: () => Promise<void>;
  /** The node's metrics: curator calls and heartbeat answers are counted there. */
  metrics?: Pick<NodeMetrics, "meter" | "heartbeatAnswered">;
  /** What the node's status says about its system slots (a VM's); absent for a node process. */
  slots?: () => SlotStatus;
}

/** The values the Role Server keeps, for observers (status, tests). */
export interface RoleServerValues {
  roles: Value<NodeRoles | undefined>;
  localCurator: Value<LocalCurator | undefined>;
  localConsensus: Value<LocalConsensus | undefined>;
  /** The local etcd member while its process runs, for a recovery from a lost quorum. */
  recovery: ConsensusRecovery;
  directory: Value<ClusterDirectory>;
  connection: Value<CuratorConnection>;
  /** The cluster's node records, as the curator's watch has them (the mesh's peers). */
  nodes: Value<readonly Node[]>;
  board: ServiceBoard;
  /** The sealed configuration each time the role server rewrites it. */
  sealed: Value<SealedConfiguration>;
  /** The last status a curator accepted from this node: set once it has rejoined (an update's trial waits for it). */
  statusPushed: Value<NodeStatus>;
  /** The worker's Kubernetes image store while its containerd answers (node management's ImportImages, ListImages). */
  imageStore: Value<ImageStore | undefined>;
}

export function newRoleServerValues(): RoleServerValues {
  return {
    roles: new Value<NodeRoles | undefined>(),
    localCurator: new Value<LocalCurator | undefined>(),
    localConsensus: new Value<LocalConsensus | undefined>(),
    recovery: new ConsensusRecovery(),
    directory: new Value<ClusterDirectory>(),
    connection: new Value<CuratorConnection>(),
    nodes: new Value<readonly Node[]>(),
    board: new ServiceBoard(),
    sealed: new Value<SealedConfiguration>(),
    statusPushed: new Value<NodeStatus>(),
    imageStore: new Value<ImageStore | undefined>(),
  };
}

/** The Role Server runnable. */
export function roleServer(options: RoleServerOptions, values: RoleServerValues = newRoleServerValues()): Runnable {
  const bootMs = options.bootMs ?? Date.now();
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    ctx.logger.info("role server starting", { node: membership.credentials.nodeId });
    ctx.run(
      "controlplane",
      controlPlaneWorker({
        layout: options.layout,
        membership: options.membership,
        roles: values.roles,
        localCurator: values.localCurator,
        localConsensus: values.localConsensus,
        recovery: values.recovery,
        board: values.board,
        etcdClientHost: options.etcdClientHost,
        ...(options.etcdBinary ? { etcdBinary: options.etcdBinary } : {}),
        ...(options.consensusJoinTiming ? { consensusJoinTiming: options.consensusJoinTiming } : {}),
        ...(options.etcdutl ? { etcdutl: options.etcdutl } : {}),
        ...(options.curatorPort !== undefined ? { curatorPort: options.curatorPort } : {}),
        ...(options.metrics ? { meter: options.metrics.meter } : {}),
      }),
    );
    ctx.run(
      "curatorconnection",
      curatorConnectionWorker({
        membership: options.membership,
        localCurator: values.localCurator,
        directory: values.directory,
        connection: values.connection,
        curatorPort: options.curatorPort,
      }),
    );
    ctx.run("rolefetch", roleFetchWorker({ membership: options.membership, connection: values.connection, roles: values.roles, directory: values.directory, nodes: values.nodes }));
    ctx.run(
      "statuspush",
      statusPushWorker({
        membership: options.membership,
        connection: values.connection,
        localCurator: values.localCurator,
        services: values.board.value,
        bootMs,
        pushed: values.statusPushed,
        ...(options.slots ? { slots: options.slots } : {}),
      }),
    );
    ctx.run("heartbeat", heartbeatWorker({ membership: options.membership, connection: values.connection, ...(options.metrics ? { answered: () => options.metrics!.heartbeatAnswered() } : {}) }));
    const etcd = options.etcdBinary ?? ETCD_BINARY;
    ctx.run(
      "backups",
      backupsWorker({
        layout: options.layout,
        membership: options.membership,
        localConsensus: values.localConsensus,
        board: values.board,
        etcd,
        etcdutl: options.etcdutl ?? (() => etcdutlBeside(etcd)),
        ...(options.storage ? { storage: options.storage } : {}),
        reportStatus: async (status) => {
          const connection = values.connection.peek();
          if (!connection) throw new Error("the node has no curator connection yet");
          await withCurator(connection, (client) => client.reportBackupStatus({ status }, { timeoutMs: BACKUP_REPORT_TIMEOUT_MS }));
        },
      }),
    );
    ctx.run(
      "sealed",
      sealedUpdateWorker({
        layout: options.layout,
        membership: options.membership,
        roles: values.roles,
        directory: values.directory,
        sealed: values.sealed,
        ...(options.scrubEsp ? { scrubEsp: options.scrubEsp } : {}),
      }),
    );
    ctx.run(
      "coldstart",
      coldStartWorker({
        layout: options.layout,
        membership: options.membership,
        roles: values.roles,
        directory: values.directory,
        connection: values.connection,
        board: values.board,
        sealed: values.sealed,
        ...(options.shareHolderPort !== undefined ? { shareHolderPort: options.shareHolderPort } : {}),
        ...(options.scrubEsp ? { scrubEsp: options.scrubEsp } : {}),
        localConsensus: values.localConsensus,
      }),
    );
    ctx.run(
      "kubernetes",
      kubernetesWorker({
        membership: options.membership,
        roles: values.roles,
        localConsensus: values.localConsensus,
        board: values.board,
        connection: values.connection,
        nodes: values.nodes,
        ephemeralDir: options.layout.ephemeral.kubernetes,
        dataDir: options.layout.data.kubernetes.path,
        ...(options.kubernetesBinDir ? { binDir: options.kubernetesBinDir } : {}),
        ...(options.prepareSystemImage ? { prepare: options.prepareSystemImage } : {}),
        ...(options.runtime ? { runtime: options.runtime } : {}),
        ...(options.noKubelet ? { noKubelet: options.noKubelet } : {}),
        ...(options.resolvers ? { resolvers: options.resolvers } : {}),
        imageStore: values.imageStore,
      }),
    );
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}
