// Node health from heartbeats, as the curator leader sees it.
//
//   node ──Heartbeat stream (an update every HEARTBEAT_INTERVAL_MS)──▶ leader
//                                                                      │ beat(node)
//                                                                      ▼
//                                 HeartbeatTracker: node → when last heard (this term)
//                                                                      │ healthOf
//                                                                      ▼
//                                  GetNodes: HEALTHY | HEARTBEAT_TIMEOUT | UNKNOWN
//
// Each update carries the node's wall clock when it was sent. The leader
// subtracts its own at receipt: that is the node's clock offset less the
// update's delay, and a delay is never negative, so the largest of the last
// CLOCK_SAMPLES is the estimate (the least delayed update). A node further
// off than MAX_CLOCK_SKEW_MS is CLOCK_SKEW (convert.ts).
//
// Heartbeats live only in the leader's memory, never in etcd: writing one
// per node every few seconds would be the cluster's largest write load, and
// a heartbeat is only worth something to the curator that received it. So a
// new leader knows nothing at first; it gives every node a grace period of
// one timeout to reach it before it calls a silent node timed out.

import { Node_Health } from "../../proto/gen/api/management_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { HEARTBEAT_TIMEOUT_MS } from "./client/mod.ts";

export interface HealthInputs {
  state: NodeState;
  /** When the leader last heard from the node in this term (ms, monotonic), if it has. */
  lastBeatMs: number | undefined;
  /** When this curator began to lead (ms, monotonic). */
  leaderSinceMs: number;
  nowMs: number;
  timeoutMs?: number;
}

export interface Health {
  health: Node_Health;
  /** Time since the last heartbeat, if one was heard this term. */
  sinceBeatMs?: number;
  /** The node's wall clock less the leader's, if its heartbeats said their time. */
  clockOffsetMs?: number;
}

/** How far a node's clock may be from the leader's before it is CLOCK_SKEW. */
export const MAX_CLOCK_SKEW_MS = 10_000;
/** How many recent heartbeats the clock offset is estimated from. */
export const CLOCK_SAMPLES = 5;
/** A sent time further than this from the leader's clock is nonsense, not an offset (ten years). */
const MAX_BELIEVABLE_OFFSET_MS = 10 * 365 * 24 * 3600_000;

/**
 * The health rules:
 *  - a node that is not UP does not send heartbeats: UNKNOWN;
 *  - a heartbeat within the timeout: HEALTHY;
 *  - none within the timeout: HEARTBEAT_TIMEOUT, except that during the
 *    leader's grace period (its first timeout's worth of leading) a node not
 *    heard from yet is UNKNOWN, since it may still be finding the new leader.
 */
export function healthOf(inputs: HealthInputs): Health {
  const timeoutMs = inputs.timeoutMs ?? HEARTBEAT_TIMEOUT_MS;
  const sinceBeatMs = inputs.lastBeatMs === undefined ? undefined : Math.max(0, inputs.nowMs - inputs.lastBeatMs);
  const withSince = sinceBeatMs === undefined ? {} : { sinceBeatMs };
  if (inputs.state !== NodeState.UP) return { health: Node_Health.UNKNOWN, ...withSince };
  if (sinceBeatMs !== undefined && sinceBeatMs <= timeoutMs) return { health: Node_Health.HEALTHY, sinceBeatMs };
  if (sinceBeatMs === undefined && inputs.nowMs - inputs.leaderSinceMs < timeoutMs) return { health: Node_Health.UNKNOWN };
  return { health: Node_Health.HEARTBEAT_TIMEOUT, ...withSince };
}

/** The leader's memory of heartbeats, for one term at a time. */
export class HeartbeatTracker {
  private readonly beats = new Map<string, number>();
  /** Per node, sent time less receipt time of its last CLOCK_SAMPLES updates, oldest first. */
  private readonly offsets = new Map<string, number[]>();
  private leaderSinceMs: number;

  constructor(
    private readonly now: () => number = () => performance.now(),
    private readonly timeoutMs = HEARTBEAT_TIMEOUT_MS,
    private readonly wallNow: () => number = () => Date.now(),
  ) {
    this.leaderSinceMs = now();
  }

  /** Forgets every heartbeat and starts the grace period: call when this curator begins to lead. */
  newTerm(): void {
    this.beats.clear();
    this.offsets.clear();
    this.leaderSinceMs = this.now();
  }

  /** A heartbeat from `nodeId`, sent at `sentAtMs` by its wall clock (0: not said). */
  beat(nodeId: string, sentAtMs = 0): void {
    this.beats.set(nodeId, this.now());
    const offset = sentAtMs - this.wallNow();
    if (sentAtMs <= 0 || !Number.isFinite(offset) || Math.abs(offset) > MAX_BELIEVABLE_OFFSET_MS) return;
    const samples = this.offsets.get(nodeId) ?? [];
    samples.push(offset);
    if (samples.length > CLOCK_SAMPLES) samples.shift();
    this.offsets.set(nodeId, samples);
  }

  /** Forgets a node (it was deleted). */
  forget(nodeId: string): void {
    this.beats.delete(nodeId);
    this.offsets.delete(nodeId);
  }

  health(nodeId: string, state: NodeState): Health {
    const health = healthOf({ state, lastBeatMs: this.beats.get(nodeId), leaderSinceMs: this.leaderSinceMs, nowMs: this.now(), timeoutMs: this.timeoutMs });
    const samples = this.offsets.get(nodeId);
    return samples?.length ? { ...health, clockOffsetMs: Math.max(...samples) } : health;
  }
}
