// The control-plane worker: runs etcd and the curator on this node while it
// is (or must become) a consensus member, and stops them when it is not.
//
//   membership ─┐
//   roles ──────┼─▶ decide ─┬─ pending bootstrap ─▶ etcd "new" ─▶ write first state ─┐
//               │           ├─ remembered member ─▶ etcd (existing data) ────────────┼─▶ curator
//               │           ├─ consensus role, not a member yet ─▶ etcd "existing" ──┘   │
//               │           └─ no consensus ─▶ nothing (leave etcd data if it had any)   ▼
//               │                                                      localCurator (Value)
//   A change of the consensus role that the running set-up cannot absorb
//   is a RestartRequest: the worker starts over and decides again.

import { create } from "@bufbuild/protobuf";
import { NodeStatusSchema, type NodeRoles } from "../../proto/gen/common/common_pb.ts";
import { clearPendingBootstrap, type ClusterMembership } from "../cluster/mod.ts";
import { clientUrl, connectEtcd, issueMemberCertificate, peerUrl, runEtcdMember, type EtcdPeer } from "../consensus/mod.ts";
import { consensusRole, curatorRunnable, etcdMembers, writeBootstrapState } from "../curator/mod.ts";
import { CURATOR_PORT, type CuratorEndpoint } from "../curator/client/mod.ts";
import type { Value } from "../event/mod.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import { rawPublicKey } from "../pki/mod.ts";
import { RestartRequest, sleep, type RunContext, type Runnable } from "../supervisor/mod.ts";
import type { ServiceBoard } from "./service_status.ts";
import { VERSION } from "../version/mod.ts";
import { X509Certificate } from "node:crypto";
import { clearEtcdMember, loadEtcdMemberState, saveEtcdMemberState, type EtcdMemberState } from "./etcd_member_state.ts";

/** How often the node checks whether its etcd member votes yet (for its status). */
export const MEMBER_STATUS_INTERVAL_MS = 2_000;

/** A curator running on this node. */
export interface LocalCurator {
  endpoint: CuratorEndpoint;
}

export interface ControlPlaneOptions {
  layout: StorageLayout;
  /** Read. */
  membership: Value<ClusterMembership>;
  /** Read: this node's roles as the cluster has them; undefined until known. */
  roles: Value<NodeRoles | undefined>;
  /** Written: the local curator while it runs. */
  localCurator: Value<LocalCurator | undefined>;
  /** Written: the "consensus" line of the node's status (voter, learner, not-assigned). */
  board: ServiceBoard;
  /** Where etcd's client port listens: loopback on a VM, the node's address when nodes share a host. */
  etcdClientHost: (membership: ClusterMembership) => string;
  curatorPort?: number;
}

export function controlPlaneWorker(options: ControlPlaneOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const { credentials } = membership;
    const { layout } = options;
    options.localCurator.set(undefined);
    // Roles are unknown until a curator answers; a node that remembers an
    // etcd membership starts it anyway (that may be the only way a curator
    // comes up at all).
    const roles = options.roles.peek();
    let member = loadEtcdMemberState(layout);
    const pending = membership.pendingBootstrap;

    if (pending && !member) {
      const certificate = issueMemberCertificate(pending.etcdCA, credentials.publicKey, { name: credentials.nodeId, addresses: [membership.address] });
      member = {
        ca: pending.etcdCA.certificate,
        certificate,
        clusterState: "new",
        initialCluster: [{ name: credentials.nodeId, peerUrl: peerUrl(membership.address) }],
      };
      saveEtcdMemberState(layout, member);
      ctx.logger.info("creating the cluster's etcd");
    } else if (roles !== undefined && !roles.consensusMember && member) {
      ctx.logger.info("consensus role removed: deleting this node's etcd data");
      clearEtcdMember(layout);
      member = undefined;
    } else if (roles?.consensusMember && !member) {
      const role = roles.consensusMember;
      clearEtcdMember(layout);
      member = {
        ca: new X509Certificate(role.caCertificate),
        certificate: new X509Certificate(role.peerCertificate),
        clusterState: "existing",
        initialCluster: role.peers.map((p): EtcdPeer => ({ name: p.name, peerUrl: p.url })),
      };
      saveEtcdMemberState(layout, member);
      ctx.logger.info("got the consensus role: joining etcd", { members: member.initialCluster.length });
    }

    if (!member) {
      options.board.report("consensus", "not-assigned", "this node is not a consensus member");
      ctx.logger.info("not a consensus member; waiting for the consensus role");
      ctx.signalHealthy();
      await options.roles.waitFor((r) => Boolean(r?.consensusMember), { signal: ctx.signal });
      throw new RestartRequest("got the consensus role");
    }
    await runControlPlane(ctx, options, membership, member);
  };
}

/**
 * Runs etcd in this runnable and the curator as its child: when etcd dies,
 * the whole control plane dies with it (the curator is useless without it),
 * the local curator disappears from the connection while the supervisor
 * backs off, and the next start decides again with the roles known by then.
 */
async function runControlPlane(ctx: RunContext, options: ControlPlaneOptions, membership: ClusterMembership, member: EtcdMemberState): Promise<void> {
  const { credentials } = membership;
  const etcdClientHost = options.etcdClientHost(membership);
  const tls = { ca: member.ca, certificate: member.certificate, privateKey: credentials.privateKey };
  const etcd = connectEtcd({ endpoints: [clientUrl(etcdClientHost)], tls });
  const port = options.curatorPort ?? CURATOR_PORT;

  const startCurator = async () => {
    const pending = membership.pendingBootstrap;
    if (pending) {
      const status = create(NodeStatusSchema, {
        externalAddress: membership.address,
        runningCurator: { port },
        timestampMs: BigInt(Date.now()),
        version: VERSION,
      });
      const record = { id: credentials.nodeId, publicKey: rawPublicKey(credentials.publicKey), status };
      const consensusMember = consensusRole(pending.etcdCA, record, [
        { id: "", name: credentials.nodeId, peerUrls: [peerUrl(membership.address)], isLearner: false },
      ]);
      const written = await writeBootstrapState(etcd, {
        ownerPublicKey: pending.ownerPublicKey,
        clusterCA: pending.clusterCA,
        etcdCA: pending.etcdCA,
        node: { ...record, joinKey: pending.joinPublicKey, clusterUnlockKey: pending.clusterUnlockKey, consensusMember },
      });
      ctx.logger.info(written ? "cluster created: first state written" : "cluster state already present (bootstrap resumed)");
      clearPendingBootstrap(options.layout);
      // Done for good: a restarted control plane must not try again.
      delete membership.pendingBootstrap;
    }
    ctx.run(
      "curator",
      curatorRunnable({
        etcd,
        nodeId: credentials.nodeId,
        listenHost: membership.address,
        port,
        privateKey: credentials.privateKey,
        clusterCA: credentials.ca,
      }),
    );
    options.localCurator.set({ endpoint: { host: membership.address, port, nodeId: credentials.nodeId } });
    ctx.run("memberstatus", async (m) => {
      m.signalHealthy();
      for (;;) {
        const self = (await etcdMembers(etcd).catch(() => [])).find((e) => e.name === credentials.nodeId);
        if (self) options.board.report("consensus", self.isLearner ? "learner" : "voter", self.isLearner ? "catching up with the other etcd members" : "");
        await sleep(MEMBER_STATUS_INTERVAL_MS, m.signal);
      }
    });
  };

  // Restart (and decide again) when the cluster says this node is no
  // longer a consensus member.
  const roleRemoved = options.roles.waitFor((r) => r !== undefined && !r.consensusMember, { signal: ctx.signal }).then(() => {
    throw new RestartRequest("consensus role removed");
  });
  roleRemoved.catch(() => {});
  let curatorFailed!: (err: Error) => void;
  const curatorFailure = new Promise<never>((_, reject) => (curatorFailed = reject));
  curatorFailure.catch(() => {});
  // etcd runs in its own scope, and the control plane never returns before
  // etcd has exited: whichever way the race below ends (cancellation, the
  // role going, the curator failing), etcd still holds files open on /data,
  // and PID 1 unmounts /data as soon as the tree has stopped.
  const etcdScope = new AbortController();
  const etcdCtx: RunContext = { ...ctx, signal: AbortSignal.any([ctx.signal, etcdScope.signal]) };
  let etcdRun: Promise<void> | undefined;
  try {
    await Promise.race([
      roleRemoved,
      curatorFailure,
      (etcdRun = runEtcdMember(etcdCtx, {
        name: credentials.nodeId,
        dataDir: options.layout.data.etcd.data,
        tlsDir: `${options.layout.ephemeral.etcd}/tls`,
        peerHost: membership.address,
        clientHost: etcdClientHost,
        ...(etcdClientHost !== membership.address ? { extraClientHosts: [membership.address] } : {}),
        tls,
        clusterState: member.clusterState,
        initialCluster: member.initialCluster,
        onReady: () => {
          startCurator().catch((err) => curatorFailed(new Error(`could not start the curator: ${(err as Error).message}`, { cause: err })));
        },
      })),
    ]);
  } finally {
    options.localCurator.set(undefined);
    etcd.close();
    etcdScope.abort();
    await etcdRun?.catch(() => {});
  }
}
