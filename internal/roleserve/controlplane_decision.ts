// What the control-plane worker does when it (re)starts, decided from what
// it knows at that moment: a pure function of its inputs, which it does not
// change. The worker carries the decision out (issues certificates, writes
// and deletes etcd state, runs etcd and the curator).
//
//   pending bootstrap, no member remembered ─────────────▶ create  (etcd "new", then write the first state)
//   member remembered, roles say no consensus ───────────▶ leave   (delete the etcd data, then wait)
//   consensus role, no member remembered ────────────────▶ join    (etcd "existing" with the role's peers)
//   member remembered (roles unknown, or consensus) ─────▶ resume  (etcd on its data; bootstrap if still pending)
//   otherwise ───────────────────────────────────────────▶ wait    (for the consensus role)
//
// Roles are undefined until a curator answers; a node that remembers an etcd
// membership resumes it anyway, since that may be the only way a curator
// comes up at all (a cold start of the whole cluster).

import { X509Certificate } from "node:crypto";
import type { NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { PendingBootstrap } from "../cluster/mod.ts";
import type { EtcdPeer } from "../consensus/mod.ts";
import type { EtcdMemberState } from "./etcd_member_state.ts";

export interface ControlPlaneInputs {
  /** This node's roles as the cluster has them; undefined until a curator answers. */
  roles: NodeRoles | undefined;
  /** The etcd membership this node remembers on its data partition. */
  remembered: EtcdMemberState | undefined;
  /** The cluster's first state, when enrolment bootstrapped this node and it is not yet in etcd. */
  pendingBootstrap: PendingBootstrap | undefined;
  /** Whether this worker already wrote `pendingBootstrap` into etcd: it is used once. */
  bootstrapWritten: boolean;
}

/** Each decision carries a reason: the log line that narrates it. */
export type ControlPlaneDecision =
  /** Create the cluster's etcd: a member certificate under the bootstrap's etcd CA, etcd "new" with this node alone. */
  | { action: "create"; bootstrap: PendingBootstrap; reason: string }
  /** Start etcd on the remembered membership; write the first state once it serves, if `bootstrap` is set. */
  | { action: "resume"; member: EtcdMemberState; bootstrap: PendingBootstrap | undefined; reason: string }
  /** Join the cluster's etcd as the consensus role says: forget any old data, remember `member`, start etcd. */
  | { action: "join"; member: EtcdMemberState; reason: string }
  /** The consensus role is gone: delete this node's etcd data, then wait for the role. */
  | { action: "leave"; reason: string }
  /** Not a consensus member: wait for the role. */
  | { action: "wait"; reason: string };

export function decideControlPlane(inputs: ControlPlaneInputs): ControlPlaneDecision {
  const { roles, remembered } = inputs;
  const bootstrap = inputs.bootstrapWritten ? undefined : inputs.pendingBootstrap;
  if (bootstrap && !remembered) {
    return { action: "create", bootstrap, reason: "creating the cluster's etcd" };
  }
  if (roles !== undefined && !roles.consensusMember && remembered) {
    return { action: "leave", reason: "consensus role removed: deleting this node's etcd data" };
  }
  const role = roles?.consensusMember;
  if (role && !remembered) {
    const member: EtcdMemberState = {
      ca: new X509Certificate(role.caCertificate),
      certificate: new X509Certificate(role.peerCertificate),
      clusterState: "existing",
      initialCluster: role.peers.map((p): EtcdPeer => ({ name: p.name, peerUrl: p.url })),
    };
    return { action: "join", member, reason: "got the consensus role: joining etcd" };
  }
  if (remembered) {
    const reason = bootstrap ? "resuming the cluster's bootstrap on the etcd member it created" : "starting the etcd member this node remembers";
    return { action: "resume", member: remembered, bootstrap, reason };
  }
  return { action: "wait", reason: "not a consensus member; waiting for the consensus role" };
}
