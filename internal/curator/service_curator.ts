// Curator: the nodes' API. Watch serves anyone in the cluster; the
// handshake calls (register, commit, join) authenticate a node by the key it
// presents in the TLS handshake, before it has a cluster certificate.

import { create } from "@bufbuild/protobuf";
import { timingSafeEqual } from "node:crypto";
import { NodeState, NodeStatusSchema } from "../../proto/gen/common/common_pb.ts";
import { WatchEventSchema, WatchEvent_Progress, type Curator, type WatchEvent } from "../../proto/gen/curator/curator_pb.ts";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import type { Logger } from "../log/mod.ts";
import { issueKubeletCertificates, type KubernetesPKI } from "../kubernetes/mod.ts";
import { ipAddressesOf, issueJoinCertificate, issueNodeCertificate, nodeIdFromPublicKey, publicKeyFromRaw } from "../pki/mod.ts";
import { apiserverUrls } from "./kubernetes_credentials.ts";
import {
  AlreadyExistsError,
  FailedPreconditionError,
  InvalidArgumentError,
  isLoopback,
  NotFoundError,
  PermissionDeniedError,
  quote,
  ResourceExhaustedError,
  type CallContext,
  type ServiceImpl,
  type ServicePolicy,
} from "../rpc/mod.ts";
import { toCuratorNode } from "./convert.ts";
import type { CuratorStore } from "./store.ts";
import type { StateReader } from "./state_cache.ts";
import { checkAddressProven, checkBackupStatus, checkNodeId, checkNodeStatus, checkPublicKey, checkWireguardKey, MAX_TICKET_BYTES } from "./validate.ts";
import { firstFreePodPrefix, podPrefixCount } from "../clusternet/mod.ts";
import type { NodeEvent, NodeWatchHub } from "./watch.ts";
import type { HeartbeatTracker } from "./heartbeats.ts";
import type { AuditTrail } from "./audit.ts";
import { registryWatch } from "./registries.ts";

export const CURATOR_POLICY: ServicePolicy<typeof Curator> = {
  watch: "cluster",
  updateNodeStatus: "node",
  registerNode: "key",
  commitNode: "key",
  joinNode: "key",
  heartbeat: "node",
  prepareColdStart: "node",
  issueKubeletCertificates: "node",
  updateNodeClusterNetworking: "node",
  reportNodeManagementCall: "node",
  watchContainerRegistries: "node",
  reportBackupStatus: "node",
};

/** How often one node may change its WireGuard key (each change is a record write and a watch event to every node). */
export const WIREGUARD_KEY_CHANGES_PER_HOUR = 10;
const HOUR_MS = 3_600_000;

/** Unlock keys are 32 random bytes. */
export const UNLOCK_KEY_BYTES = 32;

export interface CuratorServiceDeps {
  /** Writes, and the reads they compare-and-swap on. */
  store: CuratorStore;
  /** Linearizable reads, from memory (state_cache.ts). */
  state: StateReader;
  watches: NodeWatchHub;
  requireLeader: () => void;
  heartbeats: HeartbeatTracker;
  /** Where nodes' reports of their node management calls go. */
  trail?: Pick<AuditTrail, "fromNode">;
  logger: Logger;
  /** The Kubernetes PKI (read from etcd, created there if absent). */
  kubernetesPKI: () => Promise<KubernetesPKI>;
}

/** The key a handshake caller proved it holds. */
function presentedKey(ctx: CallContext): Uint8Array {
  switch (ctx.peer.kind) {
    case "key":
    case "join":
    case "node":
      return ctx.peer.publicKey;
    case "owner":
    case "metrics":
      throw new PermissionDeniedError(`the ${ctx.peer.kind} certificate cannot act as a node`);
    case "anonymous":
    case "local":
      throw new Error("unreachable: the key policy admits only certificate holders");
  }
}

function sameBytes(a: Uint8Array, b: Uint8Array): boolean {
  return a.length === b.length && timingSafeEqual(a, b);
}

/**
 * A change as Watch sends it, made once for all the watchers it goes to:
 * the hub hands every subscriber the same event object. The message is
 * complete (created), so the rpc layer only encodes it.
 */
const watchEvents = new WeakMap<NodeEvent, WatchEvent>();
function watchEventOf(event: Extract<NodeEvent, { kind: "put" | "delete" }>): WatchEvent {
  let message = watchEvents.get(event);
  if (!message) {
    message = create(WatchEventSchema, event.kind === "put" ? { nodes: [toCuratorNode(event.node)] } : { nodeTombstones: [{ nodeId: event.nodeId }] });
    watchEvents.set(event, message);
  }
  return message;
}

export function curatorService(deps: CuratorServiceDeps): ServiceImpl<typeof Curator> {
  const { store, state, logger } = deps;
  // Each node's recent WireGuard key changes (times), while this curator serves; bounded by the nodes.
  const keyChanges = new Map<string, number[]>();
  return {
    ...registryWatch(deps),
    async *watch(request, ctx) {
      const filter = request.kind.case === "nodeInCluster" ? { nodeId: request.kind.value.nodeId } : {};
      if (request.kind.case === undefined) throw new InvalidArgumentError("watch what: set node_in_cluster or nodes_in_cluster");
      if (request.kind.case === "nodeInCluster") checkNodeId("node_in_cluster.node_id", request.kind.value.nodeId);
      for await (const event of deps.watches.subscribe(filter, ctx.signal)) {
        switch (event.kind) {
          case "backlog":
            if (event.nodes.length) yield { nodes: event.nodes.map(toCuratorNode) };
            break;
          case "backlog-end":
            yield { progress: WatchEvent_Progress.LAST_BACKLOGGED };
            break;
          case "put":
          case "delete":
            yield watchEventOf(event);
            break;
          default: {
            const unreachable: never = event;
            throw new Error(`unknown watch event ${JSON.stringify(unreachable)}`);
          }
        }
      }
    },

    async updateNodeStatus(request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      if (request.nodeId !== ctx.peer.nodeId) {
        throw new PermissionDeniedError(`a node may only update its own status (caller is ${ctx.peer.nodeId}, request names ${request.nodeId ? quote(request.nodeId, 40) : "no node"})`);
      }
      if (!request.status) throw new InvalidArgumentError("status is missing");
      checkNodeStatus(request.status);
      checkAddressProven("status.external_address", request.status.externalAddress, ctx.remoteAddress);
      deps.requireLeader();
      const status = create(NodeStatusSchema, request.status);
      // A status push whose caller gave up is dropped, not retried: a newer one follows.
      await store.updateNode(
        request.nodeId,
        (r) => {
          r.status = status;
          return r;
        },
        ctx.signal,
      );
      return {};
    },

    async registerNode(request, ctx) {
      const publicKey = presentedKey(ctx);
      checkPublicKey("the presented node key", publicKey);
      if (request.registerTicket.length > MAX_TICKET_BYTES) throw new InvalidArgumentError(`register_ticket: ${request.registerTicket.length} bytes, more than ${MAX_TICKET_BYTES}`);
      checkPublicKey("join_key", request.joinKey);
      if (sameBytes(request.joinKey, publicKey)) throw new InvalidArgumentError("join_key: must be a key of its own, not the node key");
      const cluster = await store.cluster();
      if (!cluster) throw new FailedPreconditionError("the cluster is not bootstrapped");
      if (!sameBytes(request.registerTicket, cluster.registerTicket)) throw new PermissionDeniedError("wrong register ticket");
      deps.requireLeader();
      const id = nodeIdFromPublicKey(publicKey);
      const created = await store.createNode(create(NodeRecordSchema, { id, publicKey, joinKey: request.joinKey, state: NodeState.NEW }));
      switch (created) {
        case "created":
          logger.info("node registered, waiting for approval", { node: id });
          return {};
        case "node-exists": {
          // Registering again (a node retrying after a lost reply) is fine.
          const existing = await store.node(id);
          if (existing && sameBytes(existing.value.joinKey, request.joinKey)) return {};
          throw new AlreadyExistsError(`node key already in use: node ${id} is registered with another join key`);
        }
        case "join-key-in-use": {
          const holder = await store.nodeIdByJoinKey(request.joinKey);
          throw new AlreadyExistsError(`join key already in use by node ${holder ?? "(another node)"}`);
        }
        // Deleted means deleted: neither the node's key nor its join key comes back unless the owner says so.
        case "node-deleted":
          throw new PermissionDeniedError(`node ${id} was deleted from the cluster; the owner can let it register again (ctl node undelete ${id})`);
        case "join-key-deleted": {
          const deleted = await store.deletedNodeByJoinKey(request.joinKey);
          throw new PermissionDeniedError(
            `this join key belonged to node ${deleted ?? "(a deleted node)"}, which was deleted from the cluster; the owner can lift that (ctl node undelete ${deleted ?? "<id>"})`,
          );
        }
        default: {
          const unreachable: never = created;
          throw new Error(`unknown result ${String(unreachable)}`);
        }
      }
    },

    async commitNode(request, ctx) {
      const publicKey = presentedKey(ctx);
      const id = nodeIdFromPublicKey(publicKey);
      if (request.clusterUnlockKey.length !== UNLOCK_KEY_BYTES) {
        throw new InvalidArgumentError(`cluster unlock key must be ${UNLOCK_KEY_BYTES} bytes, got ${request.clusterUnlockKey.length}`);
      }
      const node = await store.node(id);
      if (!node) throw new NotFoundError(`node ${id} is not registered`);
      switch (node.value.state) {
        case NodeState.NEW:
          throw new FailedPreconditionError(`node ${id} is waiting for the owner's approval`);
        case NodeState.DECOMMISSIONED:
          throw new PermissionDeniedError(`node ${id} is decommissioned`);
        case NodeState.UP:
          // A retried commit must carry the same key, or it would lock the node out of its data.
          if (!sameBytes(node.value.clusterUnlockKey, request.clusterUnlockKey)) {
            throw new AlreadyExistsError(`node ${id} has already committed with another unlock key`);
          }
          break;
        case NodeState.STANDBY:
          break;
        case NodeState.INVALID:
          throw new FailedPreconditionError(`node ${id} has an invalid state`);
      }
      deps.requireLeader();
      await store.updateNode(id, (r) => {
        r.state = NodeState.UP;
        r.clusterUnlockKey = request.clusterUnlockKey;
        return r;
      });
      const ca = await store.ca("cluster");
      const certificate = issueNodeCertificate(ca, publicKeyFromRaw(publicKey));
      logger.info("node committed, it is UP", { node: id });
      return { caCertificate: new Uint8Array(ca.certificate.raw), nodeCertificate: new Uint8Array(certificate.raw) };
    },

    async reportBackupStatus(request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      const caller = ctx.peer.nodeId;
      deps.requireLeader();
      // The caller first: only the node the schedule names reports backups.
      const schedule = await store.backupSchedule();
      if (schedule?.nodeId !== caller) {
        throw new PermissionDeniedError(
          `only the node the backup schedule names reports its backups (caller is ${caller}; the schedule names ${schedule?.nodeId ? quote(schedule.nodeId, 40) : "no node"})`,
        );
      }
      const status = request.status;
      if (!status) throw new InvalidArgumentError("status: missing");
      if (status.nodeId !== "" && status.nodeId !== caller) throw new InvalidArgumentError(`status.node_id: ${quote(status.nodeId, 40)} is not the caller (${caller})`);
      checkBackupStatus(status);
      await store.setBackupStatus({ ...status, nodeId: caller });
      return {};
    },

    async reportNodeManagementCall(request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      deps.trail?.fromNode(ctx.peer.nodeId, request);
      return {};
    },

    async *heartbeat(requests, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      const id = ctx.peer.nodeId;
      deps.requireLeader();
      logger.debug("heartbeat stream opened", { node: id });
      for await (const update of requests) {
        // A curator that stopped leading ends the stream: the node then
        // finds the leader. (A node deleted meanwhile loses the stream to
        // the rpc adapter's rights guard: rights.ts.)
        deps.requireLeader();
        deps.heartbeats.beat(id, Number(update.sentAtMs));
        yield {};
      }
    },

    async prepareColdStart(_request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      const node = await store.node(ctx.peer.nodeId);
      if (!node?.value.roles?.consensusMember) {
        throw new FailedPreconditionError(`node ${ctx.peer.nodeId} is not a consensus member; only consensus members take part in cold starts`);
      }
      const cluster = await store.cluster();
      if (!cluster) throw new FailedPreconditionError("the cluster is not bootstrapped");
      const ca = await store.ca("cluster");
      const certificate = issueJoinCertificate(ca, publicKeyFromRaw(node.value.joinKey), node.value.id);
      return { joinCertificate: new Uint8Array(certificate.raw), unlockShareThreshold: cluster.unlockShareThreshold };
    },

    async issueKubeletCertificates(request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      checkPublicKey("kubelet_public_key", request.kubeletPublicKey);
      const node = await store.node(ctx.peer.nodeId);
      if (!node?.value.roles?.kubernetesWorker) {
        throw new PermissionDeniedError(`node ${ctx.peer.nodeId} does not hold the kubernetes-worker role; only workers get kubelet certificates`);
      }
      const pki = await deps.kubernetesPKI();
      // The kubelet serves at the node's address, where the apiserver dials it
      // and checks the serving certificate's IP names. Which addresses: those
      // the cluster CA certified for this node (a bootstrap node's), and the
      // one this call came from, which the TCP handshake proved the node
      // holds (never an address the node states). Loopback is no address
      // another node could dial.
      const addresses = [...new Set([...ipAddressesOf(ctx.peer.certificate), ...(ctx.remoteAddress && !isLoopback(ctx.remoteAddress) ? [ctx.remoteAddress] : [])])];
      const { server, client, proxy, dns, volumes, networkPolicy } = issueKubeletCertificates(pki, ctx.peer.nodeId, publicKeyFromRaw(request.kubeletPublicKey), addresses);
      logger.info("issued kubelet certificates", { node: ctx.peer.nodeId, addresses: addresses.join(",") });
      return {
        serverCertificate: new Uint8Array(server.raw),
        clientCertificate: new Uint8Array(client.raw),
        proxyClientCertificate: new Uint8Array(proxy.raw),
        dnsClientCertificate: new Uint8Array(dns.raw),
        volumesClientCertificate: new Uint8Array(volumes.raw),
        networkPolicyClientCertificate: new Uint8Array(networkPolicy.raw),
        caCertificate: new Uint8Array(pki.ca.certificate.raw),
        apiservers: await apiserverUrls(store),
      };
    },

    async updateNodeClusterNetworking(request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      checkWireguardKey("wireguard_public_key", request.wireguardPublicKey);
      deps.requireLeader();
      const node = await store.node(ctx.peer.nodeId);
      if (!node?.value.roles?.kubernetesWorker) {
        throw new FailedPreconditionError(`node ${ctx.peer.nodeId} does not hold the kubernetes-worker role; only workers join the cluster network`);
      }
      const had = node.value.clusterNetworking?.wireguardPublicKey;
      if (had?.length && !sameBytes(had, request.wireguardPublicKey)) {
        const now = Date.now();
        const recent = (keyChanges.get(ctx.peer.nodeId) ?? []).filter((t) => t > now - HOUR_MS);
        if (recent.length >= WIREGUARD_KEY_CHANGES_PER_HOUR) {
          const retryS = Math.ceil((recent[0]! + HOUR_MS - now) / 1000);
          throw new ResourceExhaustedError(`node ${ctx.peer.nodeId} changed its WireGuard key ${recent.length} times in the last hour, the most allowed; try again in ${retryS} s`);
        }
        recent.push(now);
        keyChanges.set(ctx.peer.nodeId, recent);
        for (const [id, times] of keyChanges) if (times.every((t) => t <= now - HOUR_MS)) keyChanges.delete(id);
      }
      const record = await store.assignClusterNetworking(
        ctx.peer.nodeId,
        new Uint8Array(request.wireguardPublicKey),
        (taken) => {
          const free = firstFreePodPrefix(taken);
          if (!free) throw new ResourceExhaustedError(`every pod prefix of the cluster CIDR is held (${podPrefixCount()} nodes); delete a node to free one`);
          return free;
        },
        ctx.signal,
      );
      const podPrefix = record.clusterNetworking!.podPrefix;
      if (node.value.clusterNetworking?.podPrefix !== podPrefix) logger.info("assigned a pod prefix", { node: ctx.peer.nodeId, prefix: podPrefix });
      return { podPrefix };
    },

    async joinNode(_request, ctx) {
      const joinKey = presentedKey(ctx);
      const node = (await state.read(ctx.signal)).nodeByJoinKey(joinKey);
      if (!node) throw new NotFoundError("no node has this join key");
      if (node.state !== NodeState.UP) throw new FailedPreconditionError(`node ${node.id} is ${NodeState[node.state]}, not UP`);
      logger.info("node joining", { node: node.id });
      return { clusterUnlockKey: node.clusterUnlockKey };
    },
  };
}
