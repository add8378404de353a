// Curator leader election: one curator at a time takes writes. Campaigns run
// on an etcd lease; losing the lease (etcd unreachable, node partitioned)
// ends the term, and the runnable dies and campaigns again.

import type { Namespace } from "etcd3";
import { Value } from "../event/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";

/** The etcd election all curators campaign in. */
export const ELECTION_NAME = "curator-leader";
/** Lease TTL: how long a dead leader blocks a new one, at most. */
export const LEADER_LEASE_TTL_S = 5;

/** Who leads, as this curator sees it. */
export interface Leadership {
  /** Whether this curator is the leader. */
  isLeader: boolean;
  /** The leader's identity (its node ID and curator address), if anyone leads. */
  leader?: LeaderInfo;
}

export interface LeaderInfo {
  nodeId: string;
  address: string;
}

export function leadershipRunnable(etcd: Namespace, self: LeaderInfo, state: Value<Leadership>): Runnable {
  return async (ctx) => {
    const election = etcd.election(ELECTION_NAME, LEADER_LEASE_TTL_S);
    const observer = await election.observe();
    const describe = (value: string | undefined): LeaderInfo | undefined => {
      if (!value) return undefined;
      try {
        return JSON.parse(value) as LeaderInfo;
      } catch {
        return undefined;
      }
    };
    let isLeader = false;
    const publish = () => {
      const leader = isLeader ? self : describe(observer.leader());
      state.set({ isLeader, ...(leader ? { leader } : {}) });
    };
    observer.on("change", publish);
    publish();
    const campaign = election.campaign(JSON.stringify(self));
    const failed = new Promise<never>((_, reject) => {
      campaign.on("error", (err) => {
        isLeader = false;
        publish();
        reject(new Error(`lost the curator election: ${err.message}`, { cause: err }));
      });
      observer.on("error", (err) => reject(new Error(`election observer failed: ${err.message}`, { cause: err })));
    });
    failed.catch(() => {});
    campaign.on("elected", () => {
      isLeader = true;
      ctx.logger.info("elected curator leader");
      publish();
    });
    ctx.logger.info("campaigning for curator leadership");
    ctx.signalHealthy();
    try {
      await Promise.race([untilCancelled(ctx.signal), failed]);
    } finally {
      isLeader = false;
      publish();
      await campaign.resign().catch(() => {});
      await observer.cancel().catch(() => {});
    }
  };
}
