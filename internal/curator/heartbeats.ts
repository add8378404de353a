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
}

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
  private leaderSinceMs: number;

  constructor(
    private readonly now: () => number = () => performance.now(),
    private readonly timeoutMs = HEARTBEAT_TIMEOUT_MS,
  ) {
    this.leaderSinceMs = now();
  }

  /** Forgets every heartbeat and starts the grace period: call when this curator begins to lead. */
  newTerm(): void {
    this.beats.clear();
    this.leaderSinceMs = this.now();
  }

  beat(nodeId: string): void {
    this.beats.set(nodeId, this.now());
  }

  /** Forgets a node (it was deleted). */
  forget(nodeId: string): void {
    this.beats.delete(nodeId);
  }

  health(nodeId: string, state: NodeState): Health {
    return healthOf({ state, lastBeatMs: this.beats.get(nodeId), leaderSinceMs: this.leaderSinceMs, nowMs: this.now(), timeoutMs: this.timeoutMs });
  }
}
