// Writing a new cluster's initial state: run once, by the first node, before
// its curator serves.

import { create } from "@bufbuild/protobuf";
import type { Etcd3 } from "etcd3";
import { randomBytes } from "node:crypto";
import { NodeRolesSchema, NodeState, type NodeRoles_ConsensusMember, type NodeStatus } from "../../proto/gen/common/common_pb.ts";
import { ClusterRecordSchema, NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import type { CA } from "../pki/mod.ts";
import { CuratorStore, ETCD_PREFIX } from "./store.ts";

/** Register tickets are this many random bytes. */
export const REGISTER_TICKET_BYTES = 16;

export interface BootstrapState {
  ownerPublicKey: Uint8Array;
  /** The cold-start share threshold (0: a majority of the other consensus members). */
  unlockShareThreshold?: number;
  clusterCA: CA;
  etcdCA: CA;
  node: {
    id: string;
    publicKey: Uint8Array;
    joinKey: Uint8Array;
    clusterUnlockKey: Uint8Array;
    status: NodeStatus;
    consensusMember: NodeRoles_ConsensusMember;
  };
}

/**
 * Writes the cluster record, both CAs and the first node (UP, consensus
 * member and Kubernetes controller) in one transaction. Returns false, and
 * writes nothing, if etcd already holds a cluster (a restarted bootstrap).
 */
export async function writeBootstrapState(etcd: Etcd3, state: BootstrapState): Promise<boolean> {
  const store = new CuratorStore(etcd.namespace(ETCD_PREFIX));
  return store.bootstrap({
    cluster: create(ClusterRecordSchema, {
      ownerPublicKey: state.ownerPublicKey,
      registerTicket: new Uint8Array(randomBytes(REGISTER_TICKET_BYTES)),
      createdMs: BigInt(Date.now()),
      unlockShareThreshold: state.unlockShareThreshold ?? 0,
    }),
    clusterCA: state.clusterCA,
    etcdCA: state.etcdCA,
    firstNode: create(NodeRecordSchema, {
      id: state.node.id,
      publicKey: state.node.publicKey,
      joinKey: state.node.joinKey,
      state: NodeState.UP,
      clusterUnlockKey: state.node.clusterUnlockKey,
      status: state.node.status,
      roles: create(NodeRolesSchema, { consensusMember: state.node.consensusMember, kubernetesController: {} }),
    }),
  });
}

/**
 * Writes the record of the node that restored the cluster from a backup
 * (UP, the consensus role, no other), unless it exists (a restore resumed
 * after a crash). Unfenced, like the bootstrap: no curator runs yet.
 * Returns whether it wrote it.
 */
export async function writeRestoredNode(etcd: Etcd3, node: BootstrapState["node"]): Promise<boolean> {
  const store = new CuratorStore(etcd.namespace(ETCD_PREFIX));
  if (await store.node(node.id)) return false;
  const outcome = await store.createNode(
    create(NodeRecordSchema, {
      id: node.id,
      publicKey: node.publicKey,
      joinKey: node.joinKey,
      state: NodeState.UP,
      clusterUnlockKey: node.clusterUnlockKey,
      status: node.status,
      roles: create(NodeRolesSchema, { consensusMember: node.consensusMember }),
    }),
  );
  if (outcome !== "created") throw new Error(`could not write the restoring node's record: ${outcome}`);
  return true;
}
