// Curator leader election: one curator at a time takes writes. Campaigns run
// on an etcd lease; losing the lease (etcd unreachable, node partitioned)
// ends the term, and the runnable dies and campaigns again.
//
// A curator that starts again (its etcd was killed, its process restarted)
// first removes the campaign keys of its own earlier lifetimes: their leases
// survive an etcd restart for up to a TTL, and until they go the new
// campaign would queue behind its own ghost, refusing writes because "the
// leader is" itself. One node runs one curator, so a key with this node's
// ID that this runnable did not create is always a ghost.

import type { Campaign, ElectionObserver, Lease, Namespace } from "etcd3";
import { Value } from "../event/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";

/** The etcd election all curators campaign in. */
export const ELECTION_NAME = "curator-leader";
/**
 * Lease TTL: how long a dead leader blocks a new one, at most, and how long
 * a living leader may go unheard before it is deposed. etcd3 renews every
 * TTL/3, so a leader keeps its term through a stall of about two thirds of
 * it (its node's PID 1 or the raft leader unscheduled, a slow disk). It was
 * 5 s: in a launched 3-VM cluster under TCG (2 + 1 + 1 vCPUs on two cores)
 * the leadership was lost 19 times in 7 minutes of the Kubernetes start,
 * each "Lease ... is expired", and every node's calls failed with each
 * change (issue 46). 15 s is Kubernetes's own lease (the controller-
 * manager's and scheduler's default, and the kubelets' node leases' 40 s
 * is longer still); the price is a failover of up to 15 s, plus an etcd
 * election timeout, when a leader's node dies. A leader that stops on
 * purpose resigns, and its successor does not wait.
 */
export const LEADER_LEASE_TTL_S = 15;

/**
 * A leader that has not heard its lease renewed for a whole TTL ends its
 * term itself, checked this often. etcd renewed the lease before its answer
 * came, so by then etcd has let it expire (or is about to, after the
 * extension of a raft leader change) and another curator may lead. etcd3
 * says a lease is lost only when an answer says so, or two TTLs after the
 * last one: a loaded node's leader went on calling itself leader for 39 s
 * after the next was elected (its writes refused by the fence, its
 * unfenced upkeep, such as etcd's membership and raft leadership, not).
 */
export const RENEWAL_CHECK_MS = 1_000;

/**
 * How long this node's campaign key may lead the election (the observer
 * names this node) while the campaign has not said "elected", before the
 * campaign is taken for wedged: it resigns and campaigns again. etcd3's
 * campaign waits for the keys ahead of it on a watch and then asks for its
 * key, and nothing bounds either: in a 3-VM cluster under TCG on a slow
 * host, node1 (the leader) powered off, node2's key led the election for
 * 10 minutes, node3 named node2 as leader, and node2 said "no leader is
 * elected yet": no curator took a write until the step's deadline. The
 * normal gap is one or two round trips to etcd.
 */
export const CAMPAIGN_WEDGED_MS = 15_000;

/**
 * The lease under etcd3's campaign. etcd3 1.1.2 keeps it in the campaign's
 * `lease` field (private in its types) and offers no other way to see its
 * renewals; a version that moves it fails here, at the first campaign, by
 * name.
 */
function campaignLease(campaign: Campaign): Lease {
  const lease = (campaign as unknown as { lease?: Lease }).lease;
  if (typeof lease?.on !== "function" || typeof lease.grant !== "function") throw new Error("etcd3's campaign has no lease field: the curator cannot see its lease's renewals");
  return lease;
}

/** Who leads, as this curator sees it. */
export interface Leadership {
  /** Whether this curator is the leader. */
  isLeader: boolean;
  /** The leader's identity (its node ID and curator address), if anyone leads. */
  leader?: LeaderInfo;
  /**
   * Set while this curator leads: its campaign key, relative to the
   * curator's etcd namespace. The key exists exactly as long as this term
   * (its lease); writes are fenced on it (store.ts).
   */
  fenceKey?: string;
}

export interface LeaderInfo {
  nodeId: string;
  address: string;
}

/** Deletes this node's campaign keys left by earlier lifetimes; returns how many. */
export async function removeOwnGhostCampaigns(etcd: Namespace, nodeId: string): Promise<number> {
  const prefix = `election/${ELECTION_NAME}/`;
  const keys = await etcd.getAll().prefix(prefix).strings();
  let removed = 0;
  for (const [key, value] of Object.entries(keys)) {
    let owner: string | undefined;
    try {
      owner = (JSON.parse(value) as Partial<LeaderInfo>).nodeId;
    } catch {
      continue;
    }
    if (owner !== nodeId) continue;
    await etcd.delete().key(key);
    removed++;
  }
  return removed;
}

/**
 * Deletes every curator's campaign key: after a restore or a recovery from
 * a lost quorum, before this node's curator first starts, they are all
 * ghosts of curators that are gone (their leases came back with the data,
 * and would make the new curator wait out a term and name a dead leader
 * meanwhile). Returns how many.
 */
export async function removeAllCampaigns(etcd: Namespace): Promise<number> {
  const response = await etcd.delete().prefix(`election/${ELECTION_NAME}/`).exec();
  return Number(response.deleted);
}

export function leadershipRunnable(etcd: Namespace, self: LeaderInfo, state: Value<Leadership>, timing: { campaignWedgedMs?: number } = {}): Runnable {
  const wedgedMs = timing.campaignWedgedMs ?? CAMPAIGN_WEDGED_MS;
  return async (ctx) => {
    const ghosts = await removeOwnGhostCampaigns(etcd, self.nodeId);
    if (ghosts > 0) ctx.logger.info("removed this node's campaign left from an earlier run", { keys: ghosts });
    const election = etcd.election(ELECTION_NAME, LEADER_LEASE_TTL_S);
    const describe = (value: string | undefined): LeaderInfo | undefined => {
      if (!value) return undefined;
      try {
        return JSON.parse(value) as LeaderInfo;
      } catch {
        return undefined;
      }
    };
    let isLeader = false;
    let ended = false;
    let fenceKey: string | undefined;
    let observer: ElectionObserver | undefined;
    let leadsUnelectedSince: number | undefined;
    const publish = () => {
      // The observer can see this node's own new campaign key as the leader
      // before the campaign says "elected" (they start together), and a
      // term that just ended keeps its key until its lease is revoked: this
      // node never names itself as another leader, it then knows none yet.
      const observed = describe(observer?.leader());
      const leader = isLeader ? self : observed?.nodeId === self.nodeId ? undefined : observed;
      // Since when this node's key leads without its campaign having said so (see CAMPAIGN_WEDGED_MS).
      const waiting = !isLeader && !ended && observed?.nodeId === self.nodeId;
      if (!waiting) leadsUnelectedSince = undefined;
      else leadsUnelectedSince ??= performance.now();
      state.set({ isLeader, ...(leader ? { leader } : {}), ...(isLeader && fenceKey ? { fenceKey } : {}) });
    };
    let fail!: (err: Error) => void;
    const failed = new Promise<never>((_, reject) => (fail = reject));
    failed.catch(() => {});
    // The campaign and the observer start together: independent round
    // trips, each slow on an emulated machine. (Only after the ghosts are
    // gone: the observer must never see this node's ghost as the leader.)
    const campaign = election.campaign(JSON.stringify(self));
    // The renew deadline: see RENEWAL_CHECK_MS. A verdict waits for the
    // event loop to read its sockets first (timers run before them), so
    // that a renewal that came during a stall of this process counts.
    let renewedAt = performance.now();
    const lease = campaignLease(campaign);
    const renewed = () => (renewedAt = performance.now());
    // The grant is the lease's first TTL, the keepalives each next one.
    lease.grant().then(renewed, () => {});
    lease.on("keepaliveSucceeded", renewed);
    const overdue = () => isLeader && performance.now() - renewedAt > LEADER_LEASE_TTL_S * 1000;
    const wedged = () => leadsUnelectedSince !== undefined && performance.now() - leadsUnelectedSince > wedgedMs;
    const renewalCheck = setInterval(() => {
      if (!overdue() && !wedged()) return;
      setImmediate(() => {
        if (wedged()) {
          fail(new Error(`this node's campaign has led the curator election for ${Math.round((performance.now() - leadsUnelectedSince!) / 1000)} s without being elected: campaigning again`));
          return;
        }
        if (!overdue()) return;
        isLeader = false;
        publish();
        fail(new Error(`the curator lease was not renewed for ${Math.round((performance.now() - renewedAt) / 1000)} s (its TTL is ${LEADER_LEASE_TTL_S} s): this term has ended, or is about to`));
      });
    }, RENEWAL_CHECK_MS);
    campaign.on("error", (err) => {
      isLeader = false;
      publish();
      fail(new Error(`lost the curator election: ${err.message}`, { cause: err }));
    });
    campaign.on("elected", () => {
      // Leading only counts once the fence is known: every write is fenced on it.
      campaign
        .getCampaignKey()
        .then((key) => {
          // etcd3's campaign can report "elected" after it resigned: a term
          // of a run that ended is no term (its lease is revoked).
          if (ended) return;
          fenceKey = key.slice(etcd.prefix.length);
          isLeader = true;
          ctx.logger.info("elected curator leader", { fence: fenceKey });
          publish();
        })
        // Without a fence there is no safe leading: end the term, and the runnable campaigns again.
        .catch((err: unknown) => campaign.emit("error", new Error(`elected, but the campaign key is unknown: ${(err as Error).message}`)));
    });
    try {
      observer = await election.observe();
    } catch (err) {
      clearInterval(renewalCheck);
      await campaign.resign().catch(() => {});
      throw new Error(`could not observe the curator election: ${(err as Error).message}`, { cause: err });
    }
    observer.on("change", publish);
    observer.on("error", (err) => fail(new Error(`election observer failed: ${err.message}`, { cause: err })));
    publish();
    ctx.logger.info("campaigning for curator leadership");
    ctx.signalHealthy();
    try {
      await Promise.race([untilCancelled(ctx.signal), failed]);
    } finally {
      clearInterval(renewalCheck);
      ended = true;
      const led = isLeader;
      isLeader = false;
      publish();
      const resigned = await campaign.resign().then(
        () => undefined,
        (err: unknown) => (err as Error).message,
      );
      if (led && resigned === undefined) ctx.logger.info("resigned curator leadership");
      else if (led) ctx.logger.warn("could not resign curator leadership: the others wait out its lease", { reason: resigned });
      await observer?.cancel().catch(() => {});
    }
  };
}
