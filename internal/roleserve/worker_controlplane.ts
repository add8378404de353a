// The control-plane worker: runs etcd and the curator on this node while it
// is (or must become) a consensus member, and stops them when it is not.
//
//   membership ─┐
//   roles ──────┼─▶ decide ─┬─ create: pending bootstrap ─▶ etcd "new" ─▶ write first state ─┐
//               │           ├─ resume: remembered member ─▶ etcd (existing data) ─────────────┼─▶ curator
//               │           ├─ join: consensus role, not a member yet ─▶ etcd "existing" ─────┘   │
//               │           └─ leave / wait: no consensus ─▶ nothing (delete etcd data if any)    ▼
//               │                                                           localCurator (Value)
//   The decision is decideControlPlane (controlplane_decision.ts), a pure
//   function; this file carries it out, and a run of the decided member is
//   one ControlPlaneRun (controlplane_run.ts) shared by its etcd child
//   (controlplane_etcd.ts) and its consensus child (controlplane_consensus.ts). A change of the consensus role that
//   the running set-up cannot absorb is a RestartRequest: the worker starts
//   over and decides again.

import type { Etcd3 } from "etcd3";
import type { X509Certificate } from "node:crypto";
import type { NodeRoles } from "../../proto/gen/common/common_pb.ts";
import { loadPendingRestore, type ClusterMembership, type PendingBootstrap } from "../cluster/mod.ts";
import { restoreSnapshot } from "../backup/mod.ts";
import type { CallMeter } from "../rpc/mod.ts";
import { etcdutlBeside, issueMemberCertificate, peerUrl, type EtcdMember } from "../consensus/mod.ts";
import { etcdMembers, type ConsensusJoinTiming, type CuratorReader } from "../curator/mod.ts";
import type { KubernetesKeys } from "../kubernetes/mod.ts";
import type { CuratorEndpoint } from "../curator/client/mod.ts";
import type { Value } from "../event/mod.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import { RestartRequest, sleep, type RunContext, type Runnable } from "../supervisor/mod.ts";
import type { ServiceBoard } from "./service_status.ts";
import { decideControlPlane } from "./controlplane_decision.ts";
import { consensusChild } from "./controlplane_consensus.ts";
import { etcdChild } from "./controlplane_etcd.ts";
import { ControlPlaneRun } from "./controlplane_run.ts";
import type { ConsensusRecovery } from "./consensus_recovery.ts";
import { clearEtcdMember, loadEtcdMemberState, saveEtcdMemberState, type EtcdMemberState } from "./etcd_member_state.ts";

/** How long a node that lost the consensus role keeps its etcd member serving for the cluster to remove it. */
export const LEAVE_WAIT_MS = 60_000;
/** How often it looks. */
const LEAVE_POLL_MS = 500;

/**
 * Waits until the etcd member named `name` is no longer in the member list
 * (true), or LEAVE_WAIT_MS passed (false). A member list that cannot be
 * read (etcd stopping) is looked at again.
 */
async function untilMemberRemoved(connect: () => Promise<Etcd3>, name: string, signal: AbortSignal): Promise<boolean> {
  const deadline = Date.now() + LEAVE_WAIT_MS;
  while (Date.now() < deadline) {
    const members = await connect()
      .then((etcd) => etcdMembers(etcd))
      .catch(() => undefined);
    if (members && !members.some((m) => m.name === name)) return true;
    await sleep(LEAVE_POLL_MS, signal);
  }
  return false;
}

/** A curator running on this node. */
export interface LocalCurator {
  endpoint: CuratorEndpoint;
}

/**
 * This node's etcd member while it serves, for what runs only beside it
 * (the Kubernetes controller), as the node's other parts get it: no raw client,
 * but a view per key space's owner (the curator's state read only, through
 * the curator's reader; Kubernetes' key space, for its PKI) and the member
 * itself (status, defragmentation, snapshots), none of which reads a key.
 * Only the curator, run beside the member here, writes the curator's state.
 */
export interface LocalConsensus {
  /** The curator's state, read only (curator/reader.ts). */
  curator: CuratorReader;
  /** Kubernetes' key space (kubernetes/pki.ts). */
  kubernetes: KubernetesKeys;
  /** The member itself (consensus/upkeep.ts). */
  member: EtcdMember;
  /** The member's client URL. */
  url: string;
  /** The etcd peer CA's certificate. */
  ca: X509Certificate;
  /** etcd's own metrics text, read from the member (the node's metrics pass it on). */
  metrics: (signal: AbortSignal) => Promise<string>;
}

export interface ControlPlaneOptions {
  layout: StorageLayout;
  /** Read. */
  membership: Value<ClusterMembership>;
  /** Read: this node's roles as the cluster has them; undefined until known. */
  roles: Value<NodeRoles | undefined>;
  /** Written: the local curator while it runs. */
  localCurator: Value<LocalCurator | undefined>;
  /** Written: the local etcd member while it serves. */
  localConsensus?: Value<LocalConsensus | undefined>;
  /** Written: the local etcd member while its process runs, for a recovery from a lost quorum. */
  recovery?: ConsensusRecovery;
  /** Written: the "consensus" line of the node's status (voter, learner, not-assigned). */
  board: ServiceBoard;
  /** Where etcd's client port listens: loopback on a VM, the node's address when nodes share a host. */
  etcdClientHost: (membership: ClusterMembership) => string;
  /** The etcd binary (default: the node image's). */
  etcdBinary?: string;
  /** The curator leader's waits for etcd learners (default: the product's); process tests shorten them. */
  consensusJoinTiming?: ConsensusJoinTiming;
  /** Where etcdutl is, mounting what it takes (default: beside etcd); a restore needs it. */
  etcdutl?: () => string;
  curatorPort?: number;
  /** Told how each curator call goes: the node's metrics. */
  meter?: CallMeter;
}

export function controlPlaneWorker(options: ControlPlaneOptions): Runnable {
  // The pending bootstrap is written once: after that, a restarted control
  // plane resumes its etcd member without writing it again. Remembered
  // here, across restarts, rather than by changing the membership value,
  // which belongs to enrolment and is shared with every other worker.
  let bootstrapWritten = false;
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const { credentials } = membership;
    const { layout } = options;
    options.localCurator.set(undefined);
    options.localConsensus?.set(undefined);
    // A restore (internal/cluster/flow_restore.ts) whose member is not made
    // yet: the snapshot becomes its data, a cluster of this node alone. Made
    // again from the start if a crash cut it short (member.json comes last).
    const restore = loadPendingRestore(layout);
    if (restore && !loadEtcdMemberState(layout)) {
      const ownPeerUrl = peerUrl(membership.address);
      const etcdutl = options.etcdutl?.() ?? etcdutlBeside(options.etcdBinary);
      await restoreSnapshot({ etcdutl, snapshotFile: restore.snapshotFile, dataDir: layout.data.etcd.data, name: credentials.nodeId, peerUrl: ownPeerUrl });
      saveEtcdMemberState(layout, {
        ca: restore.etcdCA.certificate,
        certificate: issueMemberCertificate(restore.etcdCA, credentials.publicKey, { name: credentials.nodeId, addresses: [membership.address] }),
        clusterState: "new",
        initialCluster: [{ name: credentials.nodeId, peerUrl: ownPeerUrl }],
        lastSeenMembers: 1,
      });
      ctx.logger.info("the backup's snapshot is this node's etcd data now: a cluster of this node alone");
    }
    const decision = decideControlPlane({
      roles: options.roles.peek(),
      remembered: loadEtcdMemberState(layout),
      pendingBootstrap: membership.pendingBootstrap,
      bootstrapWritten,
    });

    let member: EtcdMemberState | undefined;
    let bootstrap: PendingBootstrap | undefined;
    switch (decision.action) {
      case "create": {
        const { etcdCA } = decision.bootstrap;
        const certificate = issueMemberCertificate(etcdCA, credentials.publicKey, { name: credentials.nodeId, addresses: [membership.address] });
        member = {
          ca: etcdCA.certificate,
          certificate,
          clusterState: "new",
          initialCluster: [{ name: credentials.nodeId, peerUrl: peerUrl(membership.address) }],
        };
        saveEtcdMemberState(layout, member);
        bootstrap = decision.bootstrap;
        ctx.logger.info(decision.reason);
        break;
      }
      case "resume":
        member = decision.member;
        bootstrap = decision.bootstrap;
        ctx.logger.info(decision.reason);
        break;
      case "join":
        clearEtcdMember(layout);
        saveEtcdMemberState(layout, decision.member);
        member = decision.member;
        ctx.logger.info(decision.reason, { members: member.initialCluster.length });
        break;
      case "leave":
        ctx.logger.info(decision.reason);
        clearEtcdMember(layout);
        break;
      case "wait":
        break;
      default: {
        const unreachable: never = decision;
        throw new Error(`unknown control plane decision ${JSON.stringify(unreachable)}`);
      }
    }

    if (!member) {
      options.board.report("consensus", "not-assigned", "this node is not a consensus member");
      // No member, no database to report on (a NOSPACE of an earlier member must not linger).
      options.board.withdraw("etcd");
      ctx.logger.info("not a consensus member; waiting for the consensus role");
      ctx.signalHealthy();
      await options.roles.waitFor((r) => Boolean(r?.consensusMember), { signal: ctx.signal });
      throw new RestartRequest("got the consensus role");
    }
    await runControlPlane(
      ctx,
      new ControlPlaneRun(options, membership, member, bootstrap, () => {
        bootstrapWritten = true;
      }),
    );
  };
}

/**
 * Runs the decided member as a group of two children that live and die
 * together, and watches for what ends the run:
 *
 *   controlplane ── waits for: the consensus role gone (once the cluster removed
 *    │               the member) or an owner's recovery ─▶ RestartRequest, decide again
 *    ├─ etcd       the member's process (controlplane_etcd.ts); says when it serves
 *    └─ consensus  once etcd serves: finishes what a bootstrap, restore or recovery
 *        │         left to write, then runs beside the member (controlplane_consensus.ts):
 *        ├─ curator
 *        ├─ etcd-upkeep
 *        └─ memberstatus
 *
 * What the parts share is one ControlPlaneRun (controlplane_run.ts). etcd
 * dying takes the consensus runnable (and the curator, useless without it)
 * with it; the supervisor restarts both by its backoff, names the death in
 * the node's services, and the control plane stays. When the control plane
 * itself restarts, the supervisor stops and awaits both children first, so
 * that etcd never holds /data's files after the tree stopped.
 */
async function runControlPlane(ctx: RunContext, run: ControlPlaneRun): Promise<void> {
  const { options } = run;
  // Restart (and decide again) when the cluster says this node is no
  // longer a consensus member; but only once the cluster has removed this
  // node's etcd member (or LEAVE_WAIT_MS has passed). The record goes
  // first (internal/curator/consensus_membership.ts): stopping etcd at
  // once would take a voter away from a quorum that still counts it, and a
  // two-voter etcd would have no quorum left to remove it with.
  options.roles
    .waitFor((r) => r !== undefined && !r.consensusMember, { signal: ctx.signal })
    .then(async () => {
      // The curator goes first, while its etcd still serves: it resigns its
      // leadership (if it leads) rather than leaving the others to wait out its lease.
      options.localCurator.set(undefined);
      run.leave.abort();
      ctx.logger.info("consensus role removed: the curator stopped; serving as an etcd member until the cluster has removed this one");
      const connect = () => run.memberClient.peek()?.() ?? Promise.reject(new Error("etcd is not running"));
      const removed = await untilMemberRemoved(connect, run.nodeId, ctx.signal);
      if (!removed) ctx.logger.warn(`the cluster did not remove this node's etcd member within ${LEAVE_WAIT_MS / 1000} s; stopping etcd all the same`);
      run.restart.set("consensus role removed");
    })
    .catch(() => {});

  ctx.runGroup({ etcd: etcdChild(run), consensus: consensusChild(run) });
  ctx.signalHealthy();
  try {
    throw new RestartRequest(await run.restart.get({ signal: ctx.signal }));
  } finally {
    options.localCurator.set(undefined);
    options.localConsensus?.set(undefined);
  }
}
