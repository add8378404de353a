// The consensus child of a control-plane run (controlplane_run.ts): once
// the member serves, it offers it to the node (localConsensus), finishes
// what a bootstrap, a restore or a recovery left to write, and runs beside
// the member:
//
//   consensus ─┬─ curator       the cluster's control service (internal/curator);
//              │                offered as the local curator once it knows who leads
//              ├─ etcd-upkeep   quota, alarms, defragmentation (internal/consensus)
//              └─ memberstatus  learner or voter ─▶ the "consensus" line; the
//                               member count ─▶ member.json (etcd's raft timing)

import { create } from "@bufbuild/protobuf";
import type { Etcd3 } from "etcd3";
import { NodeStatusSchema } from "../../proto/gen/common/common_pb.ts";
import { clearPendingBootstrap, clearPendingRestore, loadPendingRestore } from "../cluster/mod.ts";
import { clientUrl, etcdMember, fetchEtcdMetrics, memberQuota, peerUrl, upkeepRunnable } from "../consensus/mod.ts";
import { consensusRole, curatorReader, curatorRunnable, dropLostConsensusRoles, etcdMembers, writeBootstrapState, writeRestoredNode, type Leadership } from "../curator/mod.ts";
import { kubernetesKeys } from "../kubernetes/mod.ts";
import { Value } from "../event/mod.ts";
import { rawPublicKey } from "../pki/mod.ts";
import { RestartRequest, sleep, untilCancelled, type RunContext, type Runnable } from "../supervisor/mod.ts";
import { KUBERNETES_VERSION, VERSION } from "../version/mod.ts";
import type { ControlPlaneRun } from "./controlplane_run.ts";

/** How often the node checks its etcd member's standing (for its status) once it votes. */
export const MEMBER_STATUS_INTERVAL_MS = 2_000;
/**
 * The same while the member does not vote yet: becoming a voter is the step
 * a cluster's formation waits for (the next node joins etcd only then), so
 * it is noticed within half a second.
 */
export const LEARNER_STATUS_INTERVAL_MS = 500;

export function consensusChild(run: ControlPlaneRun): Runnable {
  const { options } = run;
  return async (c) => {
    const client = await run.serving.waitFor((e) => e !== undefined, { signal: c.signal });
    const url = clientUrl(run.etcdClientHost);
    options.localConsensus?.set({
      curator: curatorReader(client),
      kubernetes: kubernetesKeys(client),
      member: etcdMember(client),
      url,
      ca: run.member.ca,
      metrics: (signal) => fetchEtcdMetrics(url, run.tls, signal),
    });
    try {
      await finishPendingWrites(run, c, client);
      runBesideMember(run, c, client);
      c.signalHealthy();
      await untilCancelled(c.signal);
    } finally {
      options.localConsensus?.set(undefined);
      options.localCurator.set(undefined);
    }
  };
}

/** What a bootstrap, a restore or a recovery left to write, before any curator reads the records. */
async function finishPendingWrites(run: ControlPlaneRun, c: RunContext, etcd: Etcd3): Promise<void> {
  const { options, membership } = run;
  const { credentials } = membership;
  const status = () =>
    create(NodeStatusSchema, { externalAddress: membership.address, runningCurator: { port: run.port }, timestampMs: BigInt(Date.now()), version: VERSION, kubernetesVersion: KUBERNETES_VERSION });
  const self = { id: "", name: credentials.nodeId, peerUrls: [peerUrl(membership.address)], isLearner: false };
  const restore = loadPendingRestore(options.layout);
  if (restore) {
    // The restore's last step: this node's own record, the others without
    // the consensus role, then the snapshot goes.
    const record = { id: credentials.nodeId, publicKey: rawPublicKey(credentials.publicKey), status: status() };
    const created = await writeRestoredNode(etcd, {
      ...record,
      joinKey: restore.joinPublicKey,
      clusterUnlockKey: restore.clusterUnlockKey,
      consensusMember: consensusRole(restore.etcdCA, record, [self]),
    });
    const dropped = await dropLostConsensusRoles(etcd, credentials.nodeId, c.logger);
    clearPendingRestore(options.layout);
    c.logger.info("cluster restored from the backup: this node is its only consensus member", { record: created ? "written" : "present already", dropped: dropped.join(",") || "none" });
  }
  if (run.member.forceNewCluster) {
    // The recovery's second half: the others lose the consensus role, then the flag goes.
    const dropped = await dropLostConsensusRoles(etcd, credentials.nodeId, c.logger);
    run.saveMember({ forceNewCluster: false, initialCluster: run.member.initialCluster.filter((p) => p.name === credentials.nodeId), lastSeenMembers: 1 });
    c.logger.info("recovered from the lost quorum: this node is etcd's only member", { dropped: dropped.join(",") || "none" });
  }
  const bootstrap = run.bootstrap;
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
    run.markBootstrapWritten();
  }
}

/** The curator, the member's upkeep and its status, as children of the consensus runnable. */
function runBesideMember(run: ControlPlaneRun, c: RunContext, etcd: Etcd3): void {
  const { options, membership } = run;
  const { credentials } = membership;
  const { leave } = run;
  // The local curator is offered to the other workers once it serves and
  // knows who leads: before that, their calls would only fail and back off.
  const leadership = new Value<Leadership>();
  const curator = curatorRunnable({
    etcd,
    nodeId: credentials.nodeId,
    listenHost: membership.address,
    port: run.port,
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
            if (!options.localCurator.peek()) options.localCurator.set({ endpoint: { host: membership.address, port: run.port, nodeId: credentials.nodeId } });
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
    upkeepRunnable({ client: async () => etcdMember(etcd), quotaBytes: memberQuota(options.layout.data.etcd.data), report: (state, message) => options.board.report("etcd", state, message) }),
  );
  c.run("memberstatus", async (m) => {
    m.signalHealthy();
    let lastSeen = run.member.lastSeenMembers;
    for (;;) {
      const members = await etcdMembers(etcd).catch(() => undefined);
      const self = members?.find((e) => e.name === credentials.nodeId);
      if (self) options.board.report("consensus", self.isLearner ? "learner" : "voter", self.isLearner ? "catching up with the other etcd members" : "");
      // Remembered for the member's next start: it chooses etcd's raft timing.
      if (self && members && members.length !== lastSeen && !m.signal.aborted) {
        lastSeen = members.length;
        run.saveMember({ lastSeenMembers: lastSeen });
      }
      await sleep(self && !self.isLearner ? MEMBER_STATUS_INTERVAL_MS : LEARNER_STATUS_INTERVAL_MS, m.signal);
    }
  });
}
