// Management: the owner's API. Reads are served by any curator, except the
// node list (only the leader knows node health) and backups; writes only by
// the leader.

import type { Etcd3 } from "etcd3";
import { BackupScheduleSchema, type ClusterEvent, type Management } from "../../proto/gen/api/management_pb.ts";
import { create } from "@bufbuild/protobuf";
import { NodeRolesSchema, NodeRoles_KubernetesControllerSchema, NodeRoles_KubernetesWorkerSchema, NodeState } from "../../proto/gen/common/common_pb.ts";
import type { NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import type { Logger } from "../log/mod.ts";
import { issueOwnerKubernetesCertificate, type KubernetesPKI } from "../kubernetes/mod.ts";
import { createCertificate, issueMetricsReaderCertificate, nodeIdFromPublicKey, publicKeyFromRaw } from "../pki/mod.ts";
import { encodable, FailedPreconditionError, InvalidArgumentError, NotFoundError, ResourceExhaustedError, UnavailableError, type ServiceImpl, type ServicePolicy } from "../rpc/mod.ts";
import { checkRevocable, etcdMembers, grantConsensus, revokeConsensus } from "./consensus_membership.ts";
import { apiserverUrls } from "./kubernetes_credentials.ts";
import { directoryOf } from "./client/mod.ts";
import { toApiNode } from "./convert.ts";
import { backupChunks } from "./backup.ts";
import { VERSION } from "../version/mod.ts";
import { shownTarget, targetUrlProblem } from "../backup/mod.ts";
import { checkNodeId, checkPublicKey, checkReaderName } from "./validate.ts";
import { registryManagement } from "./registries.ts";
import { manifestManagement } from "./manifests.ts";
import { EVENTS_PREFIX, MAX_EVENTS, decodeEvent, readEvents } from "./audit.ts";
import { applyLabelChanges, checkLabelChanges } from "./labels.ts";
import type { CuratorStore } from "./store.ts";
import type { StateReader } from "./state_cache.ts";
import type { HeartbeatTracker } from "./heartbeats.ts";

/** The node whose etcd member leads raft, by its member name (the node ID). */
async function raftLeader(etcd: Etcd3): Promise<string> {
  const status = await etcd.maintenance.status();
  return (await etcdMembers(etcd)).find((m) => m.id === status.leader)?.name ?? "";
}

/** Scheduled backups: how often they may be taken, and how many kept. */
export const MIN_BACKUP_EVERY_MINUTES = 1;
export const MAX_BACKUP_EVERY_MINUTES = 7 * 24 * 60;
export const MAX_BACKUPS_KEPT = 100;

export const MANAGEMENT_POLICY: ServicePolicy<typeof Management> = {
  getRegisterTicket: "owner",
  getClusterInfo: "cluster",
  getNodes: "owner",
  approveNode: "owner",
  updateNodeRoles: "owner",
  getEtcdCredentials: "owner",
  deleteNode: "owner",
  undeleteNode: "owner",
  updateNodeLabels: "owner",
  getKubernetesCredentials: "owner",
  getMetricsCredentials: "owner",
  backup: "owner",
  setBackupSchedule: "owner",
  getEvents: "owner",
  setContainerRegistry: "owner",
  setContainerRegistryCredentials: "owner",
  removeContainerRegistry: "owner",
  listContainerRegistries: "owner",
  applyManifest: "owner",
  deleteManifest: "owner",
  listManifests: "owner",
};

export interface ManagementDeps {
  /** Writes, and the reads they compare-and-swap on. */
  store: CuratorStore;
  /** Linearizable reads, from memory (state_cache.ts). */
  state: StateReader;
  etcd: Etcd3;
  /** Throws UNAVAILABLE (naming the leader) unless this curator leads. */
  requireLeader: () => void;
  /** The node whose curator leads, as this curator knows it (undefined: none elected). */
  leader?: () => string | undefined;
  /** Heartbeats this curator heard while leading: node health. */
  heartbeats: HeartbeatTracker;
  logger: Logger;
  /** The Kubernetes PKI (read from etcd, created there if absent). */
  kubernetesPKI: () => Promise<KubernetesPKI>;
  /** Called after a node got the consensus role (an etcd learner may have been added): the promoter looks at once. */
  onLearnerAdded?: () => void;
}

/** The node a request names, by ID or by public key. */
export function requestedNodeId(request: { id: string; publicKey: Uint8Array }): string {
  if (request.id) {
    checkNodeId("id", request.id);
    return request.id;
  }
  if (request.publicKey.length > 0) {
    checkPublicKey("public_key", request.publicKey);
    return nodeIdFromPublicKey(request.publicKey);
  }
  throw new InvalidArgumentError("name the node by id or by public key");
}

async function existingNode(store: CuratorStore, id: string): Promise<NodeRecord> {
  const node = await store.node(id);
  if (!node) throw new NotFoundError(`node ${id} not found`);
  return node.value;
}

/** GetEvents: how many events come first unless asked otherwise, and the bounds on followers. */
const DEFAULT_EVENTS = 100;
const MAX_EVENT_FOLLOWERS = 16;
const MAX_EVENTS_BEHIND = 1_000;

export function managementService(deps: ManagementDeps): ServiceImpl<typeof Management> {
  const { store, state, etcd, logger } = deps;
  let eventFollowers = 0;
  return {
    ...registryManagement(deps),
    ...manifestManagement(deps),
    async getRegisterTicket(_request, ctx) {
      const cluster = (await state.read(ctx.signal)).cluster();
      if (!cluster) throw new FailedPreconditionError("the cluster is not bootstrapped");
      return { ticket: cluster.registerTicket };
    },

    async getClusterInfo(_request, ctx) {
      const snapshot = await state.read(ctx.signal);
      const ca = snapshot.ca("cluster");
      const [backupSchedule, backupStatus, members] = await Promise.all([
        store.backupSchedule(),
        store.backupStatus(),
        etcdMembers(etcd).then(
          (list) => ({ list, error: "" }),
          (err: unknown) => ({ list: [], error: encodable((err as Error).message.split("\n")[0] ?? "") }),
        ),
      ]);
      return {
        clusterDirectory: directoryOf(snapshot.nodes()),
        caCertificate: new Uint8Array(ca.certificate.raw),
        unlockShareThreshold: snapshot.cluster()?.unlockShareThreshold ?? 0,
        curatorLeader: deps.leader?.() ?? "",
        etcdLeader: await raftLeader(etcd).catch(() => ""),
        backupSchedule,
        backupStatus,
        etcdMembers: members.list.map((m) => ({ id: BigInt(m.id).toString(16), name: m.name, isLearner: m.isLearner })),
        etcdMembersError: members.error,
      };
    },

    async setBackupSchedule(request, ctx) {
      deps.requireLeader();
      const schedule = request.schedule ?? create(BackupScheduleSchema);
      if (schedule.everyMinutes !== 0) {
        if (schedule.everyMinutes < MIN_BACKUP_EVERY_MINUTES || schedule.everyMinutes > MAX_BACKUP_EVERY_MINUTES) {
          throw new InvalidArgumentError(`schedule.every_minutes: ${schedule.everyMinutes}; use 0 (off) or ${MIN_BACKUP_EVERY_MINUTES} to ${MAX_BACKUP_EVERY_MINUTES}`);
        }
        if (schedule.keep < 1 || schedule.keep > MAX_BACKUPS_KEPT) throw new InvalidArgumentError(`schedule.keep: ${schedule.keep}; keep 1 to ${MAX_BACKUPS_KEPT} backups`);
        const id = requestedNodeId({ id: schedule.nodeId, publicKey: new Uint8Array() });
        const node = (await state.read(ctx.signal)).nodes().find((n) => n.id === id);
        if (!node) throw new NotFoundError(`node ${id} not found`);
        if (!node.roles?.consensusMember) throw new FailedPreconditionError(`node ${id} is not a consensus member: only those hold etcd's data to back up`);
        const problem = schedule.putUrl ? targetUrlProblem(schedule.putUrl) : undefined;
        if (problem) throw new InvalidArgumentError(`schedule.put_url: ${problem}`);
      }
      await store.setBackupSchedule(schedule);
      logger.info("backup schedule set", { everyMinutes: schedule.everyMinutes, keep: schedule.keep, node: schedule.nodeId, ...(schedule.putUrl ? { target: shownTarget(schedule.putUrl) } : {}) });
      return {};
    },

    async *getEvents(request, ctx) {
      if (request.last > MAX_EVENTS) throw new InvalidArgumentError(`last: ${request.last}; at most ${MAX_EVENTS}`);
      if (request.nodeId) checkNodeId("node_id", request.nodeId);
      const nodeId = request.nodeId || undefined;
      const last = request.last || DEFAULT_EVENTS;
      if (!request.follow) {
        yield* (await readEvents(store.etcd, { last, ...(nodeId ? { nodeId } : {}) })).events;
        return;
      }
      if (eventFollowers >= MAX_EVENT_FOLLOWERS) throw new ResourceExhaustedError(`${MAX_EVENT_FOLLOWERS} callers already follow this curator's events; try another curator, or later`);
      eventFollowers++;
      // Listeners go on before the backlog is sent: nothing between the read and the watch is missed.
      const pending: ClusterEvent[] = [];
      let wake: (() => void) | undefined;
      let failure: Error | undefined;
      let watcher: Awaited<ReturnType<typeof openWatch>> | undefined;
      const openWatch = (revision: number) =>
        store.etcd
          .watch()
          .prefix(EVENTS_PREFIX)
          .startRevision(String(revision + 1))
          .watcher();
      try {
        const { events, revision } = await readEvents(store.etcd, { last, ...(nodeId ? { nodeId } : {}) });
        watcher = openWatch(revision);
        watcher.on("put", (kv) => {
          const event = decodeEvent(kv.value);
          if (!event || (nodeId && event.nodeId !== nodeId)) return;
          if (pending.length >= MAX_EVENTS_BEHIND) failure ??= new ResourceExhaustedError(`this follower fell ${MAX_EVENTS_BEHIND} events behind; follow again`);
          else pending.push(event);
          wake?.();
        });
        const end = (why: string) => {
          failure ??= new UnavailableError(`the curator lost its etcd watch: ${why}; follow again`);
          wake?.();
        };
        watcher.on("error", (err) => end(err.message));
        watcher.on("disconnected", (err: Error) => end(`interrupted (${err.message})`));
        yield* events;
        const stopped = new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
        for (;;) {
          while (pending.length) yield pending.shift()!;
          if (failure) throw failure;
          if (ctx.signal.aborted) return;
          await Promise.race([new Promise<void>((resolve) => (wake = resolve)), stopped]);
          wake = undefined;
        }
      } finally {
        eventFollowers--;
        await watcher?.cancel().catch(() => {});
      }
    },

    async *getNodes(_request, ctx) {
      // Only the leader hears heartbeats, so only it can say how nodes are.
      deps.requireLeader();
      const nodes = (await state.read(ctx.signal)).nodes();
      for (const node of nodes) yield toApiNode(node, deps.heartbeats.health(node.id, node.state));
    },

    async updateNodeLabels(request, ctx) {
      deps.requireLeader();
      const id = requestedNodeId(request);
      checkLabelChanges(request.upsert, request.delete);
      // One compare-and-swap on the node record, fenced on this curator's
      // term (store.ts); a node that does not exist is NOT_FOUND there, with
      // no read of its own before it (under TCG each read is a round trip
      // among the VMs, and the writes to one node queue behind each other).
      const record = await store.updateNode(
        id,
        (r) => {
          r.labels = applyLabelChanges(r.labels, request.upsert, request.delete);
          return r;
        },
        ctx.signal,
      );
      logger.info("node labels updated", { node: id, upserted: request.upsert.length, deleted: request.delete.length });
      return { labels: record.labels };
    },

    async deleteNode(request, ctx) {
      deps.requireLeader();
      const id = requestedNodeId(request);
      const result = await store.deleteNode(
        id,
        (r) => {
          if (r.roles?.consensusMember) {
            throw new FailedPreconditionError(`node ${id} is a consensus member; take the role away first (ctl node roles unset ${id} consensus)`);
          }
        },
        ctx.signal,
      );
      if (result === "not-found") throw new NotFoundError(`node ${id} not found`);
      deps.heartbeats.forget(id);
      logger.info("node deleted", { node: id });
      return {};
    },

    async undeleteNode(request) {
      deps.requireLeader();
      checkNodeId("id", request.id);
      if ((await store.undeleteNode(request.id)) === "not-found") throw new NotFoundError(`node ${request.id} was never deleted (or its tombstone was lifted already)`);
      logger.info("deleted node's tombstone lifted: it may register again", { node: request.id });
      return {};
    },

    async approveNode(request, ctx) {
      deps.requireLeader();
      const id = requestedNodeId(request);
      const node = await existingNode(store, id);
      if (node.state === NodeState.DECOMMISSIONED) throw new FailedPreconditionError(`node ${id} is decommissioned`);
      if (node.state !== NodeState.NEW) return {};
      await store.updateNode(
        id,
        (r) => {
          if (r.state === NodeState.NEW) r.state = NodeState.STANDBY;
          return r;
        },
        ctx.signal,
      );
      logger.info("node approved", { node: id });
      return {};
    },

    async getEtcdCredentials(request, ctx) {
      checkPublicKey("public_key", request.publicKey);
      const ca = (await state.read(ctx.signal)).ca("etcd");
      const certificate = createCertificate({ commonName: "owner", organization: "nodecore etcd client", publicKey: publicKeyFromRaw(request.publicKey), kind: "client" }, ca);
      logger.info("issued an etcd client certificate to the owner");
      return { caCertificate: new Uint8Array(ca.certificate.raw), clientCertificate: new Uint8Array(certificate.raw) };
    },

    async getMetricsCredentials(request, ctx) {
      checkPublicKey("public_key", request.publicKey);
      checkReaderName("name", request.name);
      const ca = (await state.read(ctx.signal)).ca("cluster");
      const certificate = issueMetricsReaderCertificate(ca, publicKeyFromRaw(request.publicKey), request.name);
      logger.info("issued a metrics reader certificate", { name: request.name });
      return { caCertificate: new Uint8Array(ca.certificate.raw), clientCertificate: new Uint8Array(certificate.raw) };
    },

    async getKubernetesCredentials(request) {
      checkPublicKey("public_key", request.publicKey);
      const pki = await deps.kubernetesPKI();
      const certificate = issueOwnerKubernetesCertificate(pki, publicKeyFromRaw(request.publicKey));
      logger.info("issued a Kubernetes client certificate to the owner");
      return {
        clientCertificate: new Uint8Array(certificate.raw),
        caCertificate: new Uint8Array(pki.ca.certificate.raw),
        apiservers: await apiserverUrls(store),
      };
    },

    async *backup(_request, ctx) {
      deps.requireLeader();
      const snapshot = await state.read(ctx.signal);
      const cluster = snapshot.cluster();
      if (!cluster) throw new FailedPreconditionError("the cluster is not bootstrapped");
      const nodes = snapshot.nodes().map((n) => ({ id: n.id, address: n.status?.externalAddress ?? "", consensus: Boolean(n.roles?.consensusMember) }));
      const about = { caFingerprint: snapshot.ca("cluster").certificate.fingerprint256, nodeCount: nodes.length, nodes, nodecoreVersion: VERSION };
      let bytes = 0;
      for await (const chunk of backupChunks(etcd, cluster.ownerPublicKey, about, snapshot.ca("cluster").privateKey, ctx.signal)) {
        bytes += chunk.data.length;
        yield chunk;
      }
      logger.info("backup sent to the owner", { bytes, nodes: about.nodeCount });
    },

    async updateNodeRoles(request) {
      deps.requireLeader();
      const id = requestedNodeId(request);
      const node = await existingNode(store, id);
      if (node.state !== NodeState.UP) {
        throw new FailedPreconditionError(`node ${id} is ${NodeState[node.state]}; roles can only be given to nodes that are UP`);
      }
      let consensusMember = node.roles?.consensusMember;
      if (request.consensusMember === true && !consensusMember) {
        consensusMember = await grantConsensus(etcd, store, node, logger);
        deps.onLearnerAdded?.();
      }
      const revoking = request.consensusMember === false && consensusMember !== undefined;
      if (revoking) {
        await checkRevocable(etcd, node);
        consensusMember = undefined;
      }
      await store.updateNode(id, (r) => {
        const roles = r.roles ?? create(NodeRolesSchema);
        roles.consensusMember = consensusMember;
        if (request.kubernetesController !== undefined) {
          roles.kubernetesController = request.kubernetesController ? create(NodeRoles_KubernetesControllerSchema) : undefined;
        }
        if (request.kubernetesWorker !== undefined) {
          roles.kubernetesWorker = request.kubernetesWorker ? create(NodeRoles_KubernetesWorkerSchema) : undefined;
        }
        r.roles = roles;
        return r;
      });
      // The record first, then etcd: an interruption here leaves what the
      // reconciler finishes. The leader's own member is not removed here:
      // that would take this curator's etcd (and the caller's reply) before
      // it resigned, and the others would wait out its lease. Its node's
      // curator resigns once it sees the record, and the next leader's
      // reconciler removes the member.
      if (revoking && id === deps.leader?.()) logger.info("this curator's own node leaves consensus: it resigns, and the next leader removes its etcd member", { node: id });
      else if (revoking) await revokeConsensus(etcd, node, logger);
      logger.info("node roles updated", {
        node: id,
        consensusMember: Boolean(consensusMember),
        ...(request.kubernetesController !== undefined ? { kubernetesController: request.kubernetesController } : {}),
        ...(request.kubernetesWorker !== undefined ? { kubernetesWorker: request.kubernetesWorker } : {}),
      });
      return {};
    },
  };
}
