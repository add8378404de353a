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
//   function; this file carries it out. A change of the consensus role that
//   the running set-up cannot absorb is a RestartRequest: the worker starts
//   over and decides again.

import { create } from "@bufbuild/protobuf";
import type { Etcd3 } from "etcd3";
import type { X509Certificate } from "node:crypto";
import { NodeStatusSchema, type NodeRoles } from "../../proto/gen/common/common_pb.ts";
import { clearPendingBootstrap, clearPendingRestore, loadPendingRestore, type ClusterMembership, type PendingBootstrap } from "../cluster/mod.ts";
import { restoreSnapshot } from "../backup/mod.ts";
import type { CallMeter } from "../rpc/mod.ts";
import { EtcdNotAMemberError, etcdutlBeside, clientUrl, connectEtcd, fetchEtcdMetrics, issueMemberCertificate, memberQuota, peerUrl, runEtcdMember, upkeepRunnable } from "../consensus/mod.ts";
import { consensusRole, curatorRunnable, type ConsensusJoinTiming, dropLostConsensusRoles, etcdMembers, writeBootstrapState, writeRestoredNode, type Leadership } from "../curator/mod.ts";
import { CURATOR_PORT, type CuratorEndpoint } from "../curator/client/mod.ts";
import { Value } from "../event/mod.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import { rawPublicKey } from "../pki/mod.ts";
import { RestartRequest, sleep, untilCancelled, type RunContext, type Runnable } from "../supervisor/mod.ts";
import type { ServiceBoard } from "./service_status.ts";
import { VERSION } from "../version/mod.ts";
import { decideControlPlane } from "./controlplane_decision.ts";
import type { ConsensusRecovery } from "./consensus_recovery.ts";
import { clearEtcdMember, loadEtcdMemberState, saveEtcdMemberState, type EtcdMemberState } from "./etcd_member_state.ts";

/** How often the node checks its etcd member's standing (for its status) once it votes. */
export const MEMBER_STATUS_INTERVAL_MS = 2_000;
/**
 * The same while the member does not vote yet: becoming a voter is the step
 * a cluster's formation waits for (the next node joins etcd only then), so
 * it is noticed within half a second.
 */
export const LEARNER_STATUS_INTERVAL_MS = 500;
/** How long a node that holds the consensus role, but whose etcd the cluster has no member for, waits before it tries to join again. */
export const REJOIN_WAIT_MS = 10_000;
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

/** This node's etcd member while it serves: for what runs only beside it (the Kubernetes controller). */
export interface LocalConsensus {
  /** A client of the member, under the etcd peer CA (the control plane's own). */
  etcd: Etcd3;
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
    await runControlPlane(ctx, {
      options,
      membership,
      member,
      bootstrap,
      onBootstrapWritten: () => {
        bootstrapWritten = true;
      },
    });
  };
}

/** What runControlPlane runs: the decided member, and the bootstrap to write once etcd serves. */
interface ControlPlaneRun {
  options: ControlPlaneOptions;
  membership: ClusterMembership;
  member: EtcdMemberState;
  bootstrap: PendingBootstrap | undefined;
  /** Called once `bootstrap` is in etcd (and its file is gone). */
  onBootstrapWritten: () => void;
}

/**
 * Runs the decided member as a group of two children that live and die
 * together, and watches for what ends the run:
 *
 *   controlplane ── waits for: the consensus role gone (once the cluster removed
 *    │               the member) or an owner's recovery ─▶ RestartRequest, decide again
 *    ├─ etcd       the member's process (consensus/etcd_process.ts); says when it serves
 *    └─ consensus  once etcd serves: finishes what a bootstrap, restore or recovery
 *        │         left to write, then runs beside the member:
 *        ├─ curator
 *        ├─ etcd-upkeep
 *        └─ memberstatus
 *
 * etcd dying takes the consensus runnable (and the curator, useless
 * without it) with it; the supervisor restarts both by its backoff, names
 * the death in the node's services, and the control plane stays. When the
 * control plane itself restarts, the supervisor stops and awaits both
 * children first, so that etcd never holds /data's files after the tree
 * stopped.
 */
async function runControlPlane(ctx: RunContext, run: ControlPlaneRun): Promise<void> {
  const { options, membership } = run;
  const { credentials } = membership;
  // What member.json says; a recovery, the member count and a finished recovery change it while the member runs.
  let member = run.member;
  let bootstrap = run.bootstrap;
  const etcdClientHost = options.etcdClientHost(membership);
  const tls = { ca: member.ca, certificate: member.certificate, privateKey: credentials.privateKey };
  const port = options.curatorPort ?? CURATOR_PORT;
  /** The running member's client, from its spawn to its exit (the etcd child's). */
  const memberClient = new Value<(() => Promise<Etcd3>) | undefined>();
  /** The member's client once it serves: what the consensus child waits for. */
  const serving = new Value<Etcd3 | undefined>();
  /** Why the control plane must start over and decide again. */
  const restart = new Value<string>();
  /** Stops the curator early, while etcd still serves, when the node leaves consensus. */
  const leave = new AbortController();

  const etcd: Runnable = async (c) => {
    serving.set(undefined);
    // Made once etcd's process is spawned (runEtcdMember calls it): etcd3's
    // code loads while etcd starts. Nothing uses the client before etcd serves.
    let connecting: Promise<Etcd3> | undefined;
    const connect = () => (connecting ??= connectEtcd({ endpoints: [clientUrl(etcdClientHost)], tls }));
    const forced = member.forceNewCluster === true;
    if (forced) c.logger.warn("recovering from a lost quorum: etcd starts as a one-member cluster from this node's data");
    memberClient.set(connect);
    // The owner may ask for a recovery from a lost quorum (consensus_recovery.ts)
    // while the process runs, serving or not: recorded before the answer
    // goes out, then the member starts over forced.
    options.recovery?.running.set({
      nodeId: credentials.nodeId,
      client: connect,
      recover: async () => {
        member = { ...member, forceNewCluster: true };
        saveEtcdMemberState(options.layout, member);
        ctx.logger.warn("the owner asked for a recovery from a lost quorum: restarting etcd as a one-member cluster");
        setTimeout(() => restart.set("recovery from a lost quorum requested"), 0);
      },
    });
    try {
      await runEtcdMember(c, {
        ...(options.etcdBinary ? { binary: options.etcdBinary } : {}),
        name: credentials.nodeId,
        dataDir: options.layout.data.etcd.data,
        tlsDir: `${options.layout.ephemeral.etcd}/tls`,
        peerHost: membership.address,
        clientHost: etcdClientHost,
        ...(etcdClientHost !== membership.address ? { extraClientHosts: [membership.address] } : {}),
        tls,
        client: connect,
        clusterState: member.clusterState,
        initialCluster: member.initialCluster,
        expectedMembers: forced ? 1 : (member.lastSeenMembers ?? member.initialCluster.length),
        forceNewCluster: forced,
        onReady: () => {
          connect().then(
            (client) => serving.set(client),
            () => {},
          );
        },
      });
    } catch (err) {
      if (!c.signal.aborted && !leave.signal.aborted && err instanceof EtcdNotAMemberError && options.roles.peek()?.consensusMember) {
        // The node holds the role, but the cluster has no member for it: the
        // leader gave up its learner (consensus_membership.ts), or removed
        // its member while it was down. Its etcd data is of no use now; it
        // goes, and the node joins again from the role as the cluster has it
        // by then (the leader adds a new learner once this node is up).
        c.logger.warn(`the cluster has no etcd member for this node, which holds the consensus role: dropping its etcd data and joining again in ${REJOIN_WAIT_MS / 1000} s`, { reason: err.message });
        clearEtcdMember(options.layout);
        options.board.report("consensus", "rejoining", "the cluster has no etcd member for this node; joining again once it adds one");
        await sleep(REJOIN_WAIT_MS, c.signal);
        restart.set("the cluster has no etcd member for this node: joining again");
        await untilCancelled(c.signal);
      }
      if (c.signal.aborted || !leave.signal.aborted) throw err;
      // An etcd that stops because the cluster removed its member is the leave going as planned.
      restart.set("consensus role removed (etcd stopped once the cluster removed its member)");
      await untilCancelled(c.signal);
    } finally {
      options.recovery?.running.set(undefined);
      memberClient.set(undefined);
      serving.set(undefined);
      await connecting?.then(
        (client) => client.close(),
        () => {},
      );
    }
  };

  const consensus: Runnable = async (c) => {
    const client = await serving.waitFor((e) => e !== undefined, { signal: c.signal });
    const url = clientUrl(etcdClientHost);
    options.localConsensus?.set({ etcd: client, url, ca: member.ca, metrics: (signal) => fetchEtcdMetrics(url, tls, signal) });
    try {
      await finishPendingWrites(c, client);
      runBesideMember(c, client);
      c.signalHealthy();
      await untilCancelled(c.signal);
    } finally {
      options.localConsensus?.set(undefined);
      options.localCurator.set(undefined);
    }
  };

  /** What a bootstrap, a restore or a recovery left to write, before any curator reads the records. */
  const finishPendingWrites = async (c: RunContext, etcd: Etcd3) => {
    const status = () => create(NodeStatusSchema, { externalAddress: membership.address, runningCurator: { port }, timestampMs: BigInt(Date.now()), version: VERSION });
    const self = { id: "", name: credentials.nodeId, peerUrls: [peerUrl(membership.address)], isLearner: false };
    const restore = loadPendingRestore(options.layout);
    if (restore) {
      // The restore's last step: this node's own record, the others without
      // the consensus role, then the snapshot goes.
      const record = { id: credentials.nodeId, publicKey: rawPublicKey(credentials.publicKey), status: status() };
      const created = await writeRestoredNode(etcd, { ...record, joinKey: restore.joinPublicKey, clusterUnlockKey: restore.clusterUnlockKey, consensusMember: consensusRole(restore.etcdCA, record, [self]) });
      const dropped = await dropLostConsensusRoles(etcd, credentials.nodeId, c.logger);
      clearPendingRestore(options.layout);
      c.logger.info("cluster restored from the backup: this node is its only consensus member", { record: created ? "written" : "present already", dropped: dropped.join(",") || "none" });
    }
    if (member.forceNewCluster) {
      // The recovery's second half: the others lose the consensus role, then the flag goes.
      const dropped = await dropLostConsensusRoles(etcd, credentials.nodeId, c.logger);
      member = { ...member, forceNewCluster: false, initialCluster: member.initialCluster.filter((p) => p.name === credentials.nodeId), lastSeenMembers: 1 };
      saveEtcdMemberState(options.layout, member);
      c.logger.info("recovered from the lost quorum: this node is etcd's only member", { dropped: dropped.join(",") || "none" });
    }
    if (bootstrap) {
      const record = { id: credentials.nodeId, publicKey: rawPublicKey(credentials.publicKey), status: status() };
      const written = await writeBootstrapState(etcd, {
        ownerPublicKey: bootstrap.ownerPublicKey,
        unlockShareThreshold: bootstrap.unlockShareThreshold,
        clusterCA: bootstrap.clusterCA,
        etcdCA: bootstrap.etcdCA,
        node: { ...record, joinKey: bootstrap.joinPublicKey, clusterUnlockKey: bootstrap.clusterUnlockKey, consensusMember: consensusRole(bootstrap.etcdCA, record, [self]) },
      });
      c.logger.info(written ? "cluster created: first state written" : "cluster state already present (bootstrap resumed)");
      clearPendingBootstrap(options.layout);
      // Done for good: neither a restarted group nor a restarted control plane tries again.
      bootstrap = undefined;
      run.onBootstrapWritten();
    }
  };

  /** The curator, the member's upkeep and its status, as children of the consensus runnable. */
  const runBesideMember = (c: RunContext, etcd: Etcd3) => {
    // The local curator is offered to the other workers once it serves and
    // knows who leads: before that, their calls would only fail and back off.
    const leadership = new Value<Leadership>();
    const curator = curatorRunnable({
      etcd,
      nodeId: credentials.nodeId,
      listenHost: membership.address,
      port,
      privateKey: credentials.privateKey,
      clusterCA: credentials.ca,
      leadership,
      ...(options.meter ? { meter: options.meter } : {}),
      ...(options.consensusJoinTiming ? { consensusJoinTiming: options.consensusJoinTiming } : {}),
    });
    c.run("curator", async (cc) => {
      if (leave.signal.aborted) return cc.signalDone();
      // Stopped early, while etcd still serves, when the node leaves consensus.
      const signal = AbortSignal.any([cc.signal, leave.signal]);
      await curator({
        ...cc,
        signal,
        signalHealthy: () => {
          cc.signalHealthy();
          leadership
            .waitFor((l) => l.leader !== undefined, { signal })
            .then(() => {
              // Once: a restarted curator serves at the same endpoint.
              if (!options.localCurator.peek()) options.localCurator.set({ endpoint: { host: membership.address, port, nodeId: credentials.nodeId } });
            })
            .catch(() => {});
        },
      });
      // Left: a death, not "done". What the curator started (its leadership
      // campaign, promoter, heartbeats) runs under this runnable's own tree
      // node, which "done" would leave running: the leader would keep its
      // term, and the other curators would name it for its lease's length.
      // The death stops and awaits them (the campaign resigns on its way
      // out); the next run sees the leave and is done at once.
      if (leave.signal.aborted && !cc.signal.aborted) throw new RestartRequest("the node left consensus: the curator's own children stop with it");
    });
    // The member's database: sizes, alarms, defragmentation, a way back from NOSPACE.
    c.run(
      "etcd-upkeep",
      upkeepRunnable({ client: async () => etcd, quotaBytes: memberQuota(options.layout.data.etcd.data), report: (state, message) => options.board.report("etcd", state, message) }),
    );
    c.run("memberstatus", async (m) => {
      m.signalHealthy();
      let lastSeen = member.lastSeenMembers;
      for (;;) {
        const members = await etcdMembers(etcd).catch(() => undefined);
        const self = members?.find((e) => e.name === credentials.nodeId);
        if (self) options.board.report("consensus", self.isLearner ? "learner" : "voter", self.isLearner ? "catching up with the other etcd members" : "");
        // Remembered for the member's next start: it chooses etcd's raft timing.
        if (self && members && members.length !== lastSeen && !m.signal.aborted) {
          lastSeen = members.length;
          member = { ...member, lastSeenMembers: lastSeen };
          saveEtcdMemberState(options.layout, member);
        }
        await sleep(self && !self.isLearner ? MEMBER_STATUS_INTERVAL_MS : LEARNER_STATUS_INTERVAL_MS, m.signal);
      }
    });
  };

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
      leave.abort();
      ctx.logger.info("consensus role removed: the curator stopped; serving as an etcd member until the cluster has removed this one");
      const connect = () => memberClient.peek()?.() ?? Promise.reject(new Error("etcd is not running"));
      const removed = await untilMemberRemoved(connect, credentials.nodeId, ctx.signal);
      if (!removed) ctx.logger.warn(`the cluster did not remove this node's etcd member within ${LEAVE_WAIT_MS / 1000} s; stopping etcd all the same`);
      restart.set("consensus role removed");
    })
    .catch(() => {});

  ctx.runGroup({ etcd, consensus });
  ctx.signalHealthy();
  try {
    throw new RestartRequest(await restart.get({ signal: ctx.signal }));
  } finally {
    options.localCurator.set(undefined);
    options.localConsensus?.set(undefined);
  }
}
