// The etcd child of a control-plane run (controlplane_run.ts): the member's
// process (consensus/etcd_process.ts), its client from spawn to exit, and
// what ends it: an owner's recovery from a lost quorum (the member starts
// over forced), a cluster that has no member for this node any more (its
// data goes and it joins again), or the leave going as planned.

import type { Etcd3 } from "etcd3";
import { clientUrl, connectEtcd, EtcdNotAMemberError, runEtcdMember } from "../consensus/mod.ts";
import { sleep, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { ControlPlaneRun } from "./controlplane_run.ts";
import { clearEtcdMember } from "./etcd_member_state.ts";

/** How long a node that holds the consensus role, but whose etcd the cluster has no member for, waits before it tries to join again. */
export const REJOIN_WAIT_MS = 10_000;

export function etcdChild(run: ControlPlaneRun): Runnable {
  const { options, membership } = run;
  return async (c) => {
    run.serving.set(undefined);
    // Made once etcd's process is spawned (runEtcdMember calls it): etcd3's
    // code loads while etcd starts. Nothing uses the client before etcd serves.
    let connecting: Promise<Etcd3> | undefined;
    const connect = () => (connecting ??= connectEtcd({ endpoints: [clientUrl(run.etcdClientHost)], tls: run.tls }));
    const forced = run.member.forceNewCluster === true;
    if (forced) c.logger.warn("recovering from a lost quorum: etcd starts as a one-member cluster from this node's data");
    run.memberClient.set(connect);
    // The owner may ask for a recovery from a lost quorum (consensus_recovery.ts)
    // while the process runs, serving or not: recorded before the answer
    // goes out, then the member starts over forced.
    options.recovery?.running.set({
      nodeId: run.nodeId,
      client: connect,
      recover: async () => {
        run.saveMember({ forceNewCluster: true });
        c.logger.warn("the owner asked for a recovery from a lost quorum: restarting etcd as a one-member cluster");
        setTimeout(() => run.restart.set("recovery from a lost quorum requested"), 0);
      },
    });
    try {
      await runEtcdMember(c, {
        ...(options.etcdBinary ? { binary: options.etcdBinary } : {}),
        name: run.nodeId,
        dataDir: options.layout.data.etcd.data,
        tlsDir: `${options.layout.ephemeral.etcd}/tls`,
        peerHost: membership.address,
        clientHost: run.etcdClientHost,
        ...(run.etcdClientHost !== membership.address ? { extraClientHosts: [membership.address] } : {}),
        tls: run.tls,
        client: connect,
        clusterState: run.member.clusterState,
        initialCluster: run.member.initialCluster,
        expectedMembers: forced ? 1 : (run.member.lastSeenMembers ?? run.member.initialCluster.length),
        forceNewCluster: forced,
        onReady: () => {
          connect().then(
            (client) => run.serving.set(client),
            () => {},
          );
        },
      });
    } catch (err) {
      if (!c.signal.aborted && !run.leave.signal.aborted && err instanceof EtcdNotAMemberError && options.roles.peek()?.consensusMember) {
        // The node holds the role, but the cluster has no member for it: the
        // leader gave up its learner (consensus_membership.ts), or removed
        // its member while it was down. Its etcd data is of no use now; it
        // goes, and the node joins again from the role as the cluster has it
        // by then (the leader adds a new learner once this node is up).
        c.logger.warn(`the cluster has no etcd member for this node, which holds the consensus role: dropping its etcd data and joining again in ${REJOIN_WAIT_MS / 1000} s`, { reason: err.message });
        clearEtcdMember(options.layout);
        options.board.report("consensus", "rejoining", "the cluster has no etcd member for this node; joining again once it adds one");
        await sleep(REJOIN_WAIT_MS, c.signal);
        run.restart.set("the cluster has no etcd member for this node: joining again");
        await untilCancelled(c.signal);
      }
      if (c.signal.aborted || !run.leave.signal.aborted) throw err;
      // An etcd that stops because the cluster removed its member is the leave going as planned.
      run.restart.set("consensus role removed (etcd stopped once the cluster removed its member)");
      await untilCancelled(c.signal);
    } finally {
      options.recovery?.running.set(undefined);
      run.memberClient.set(undefined);
      run.serving.set(undefined);
      await connecting?.then(
        (client) => client.close(),
        () => {},
      );
    }
  };
}
