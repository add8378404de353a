// Recovery from a lost quorum (`ctl cluster recover --from <node>`): the
// owner picks a consensus member that survived; its etcd starts again as a
// one-member cluster from its own data (etcd's --force-new-cluster), and
// the node records drop the consensus role of every other node.
//
//   owner ── NodeManagement.RecoverConsensus ──▶ plan(): what this member
//            has (revision, members, whether a quorum still answers)
//        └─ not a dry run, and no quorum (or forced) ──▶ member.json gets
//            forceNewCluster (durably), the control plane starts over
//   control plane: etcd --force-new-cluster ─▶ serves alone ─▶ records:
//            the others lose the consensus role ─▶ member.json: the flag
//            cleared ─▶ the curator starts, and leads
//
// A recovery interrupted anywhere converges by itself: until the flag is
// cleared, every start of the member forces again (idempotent on a member
// that is alone) and drops the roles again (idempotent on records that no
// longer hold them).
//
// What this cannot do is stop a lost member from coming back: two lost
// members that return with their data still make a quorum of the old
// membership. Lost means lost for good; a node that does come back must be
// wiped (its disk, or `ctl node reset --wipe` if it can still be reached)
// before it joins again.

import type { Etcd3 } from "etcd3";
import { ETCD_CALL_TIMEOUT_MS } from "../consensus/mod.ts";
import { etcdMembers, type EtcdMember } from "../curator/mod.ts";
import { Value } from "../event/mod.ts";
import { FailedPreconditionError } from "../rpc/mod.ts";

/** How long a linearizable read gets to show that a quorum still answers. */
export const QUORUM_PROBE_MS = 3_000;

/** This node's etcd member while its process runs (serving or not), for a recovery. */
export interface RunningMember {
  nodeId: string;
  /** A client of the member (it answers serializable calls without a quorum). */
  client: () => Promise<Etcd3>;
  /** Records the recovery durably and starts the control plane over; resolves once recorded. */
  recover: () => Promise<void>;
}

export interface RecoveryPlan {
  /** This node, the one that stays. */
  survivor: string;
  memberId: string;
  /** The member it takes for the raft leader, hex; "" if none. */
  leaderId: string;
  /** The newest revision this member has applied: what the recovered cluster keeps. */
  revision: number;
  /** Whether a quorum answered a linearizable read just now. */
  quorum: boolean;
  /** Why it is taken to have a quorum or not, in words. */
  quorumReason: string;
  /** The members that the recovery removes. */
  lost: EtcdMember[];
}

/** Shared by the control plane (which runs the member) and node management (which the owner calls). */
export class ConsensusRecovery {
  readonly running = new Value<RunningMember | undefined>();

  private member(): RunningMember {
    const running = this.running.peek();
    if (!running) throw new FailedPreconditionError("this node runs no etcd member (it holds no consensus role, or its member is not started yet); recover from a node that does");
    return running;
  }

  /** What a recovery from this node would do, looked at now. */
  async plan(): Promise<RecoveryPlan> {
    const running = this.member();
    const etcd = await running.client();
    // The member's own status: served without a quorum (unlike the alarms that memberStatus also reads).
    const status = await etcd.maintenance.status().catch((err) => {
      throw new FailedPreconditionError(`this node's etcd member does not answer: ${(err as Error).message}`);
    });
    const members = await etcdMembers(etcd);
    const quorum = await linearizableRead(etcd);
    return {
      survivor: running.nodeId,
      memberId: hex(status.header.member_id),
      leaderId: status.leader === "0" ? "" : hex(status.leader),
      revision: Number(status.header.revision),
      quorum: quorum.ok,
      quorumReason: quorum.reason,
      lost: members.filter((m) => m.name !== running.nodeId),
    };
  }

  /** Starts the recovery, unless a quorum answers and `force` is not given; the plan it acts on. */
  async start(force: boolean): Promise<RecoveryPlan> {
    const plan = await this.plan();
    if (plan.quorum && plan.lost.length === 0) throw new FailedPreconditionError("this member is alone in etcd and has its quorum: there is nothing to recover");
    if (plan.quorum && !force) {
      throw new FailedPreconditionError(`etcd still has a quorum (${plan.quorumReason}); recovering would throw the other ${plan.lost.length} members away. Use force only if they are lost for good`);
    }
    await this.member().recover();
    return plan;
  }
}

const hex = (id: string) => BigInt(id).toString(16);

/** Whether a linearizable read comes back within QUORUM_PROBE_MS: only a quorum can answer one. */
async function linearizableRead(etcd: Etcd3): Promise<{ ok: boolean; reason: string }> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), Math.min(QUORUM_PROBE_MS, ETCD_CALL_TIMEOUT_MS))));
  try {
    const read = etcd
      .get("nodecore/quorum-probe")
      .exec()
      .then(
        () => "ok" as const,
        (err: Error) => err,
      );
    const outcome = await Promise.race([read, timeout]);
    if (outcome === "ok") return { ok: true, reason: "a linearizable read was answered" };
    if (outcome === "timeout") return { ok: false, reason: `a linearizable read got no answer within ${QUORUM_PROBE_MS / 1000} s` };
    return { ok: false, reason: `a linearizable read failed: ${outcome.message}` };
  } finally {
    clearTimeout(timer);
  }
}
