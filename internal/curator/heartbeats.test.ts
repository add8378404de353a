import { describe, expect, test } from "bun:test";
import { Node_Health } from "../../proto/gen/api/management_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { HeartbeatTracker, healthOf } from "./heartbeats.ts";

const TIMEOUT = 12_000;

describe("health rules", () => {
  const cases: { name: string; state?: NodeState; lastBeatMs?: number; leaderSinceMs: number; nowMs: number; health: Node_Health; since?: number }[] = [
    { name: "a recent heartbeat is HEALTHY", lastBeatMs: 95_000, leaderSinceMs: 0, nowMs: 100_000, health: Node_Health.HEALTHY, since: 5_000 },
    { name: "a heartbeat exactly one timeout ago is still HEALTHY", lastBeatMs: 88_000, leaderSinceMs: 0, nowMs: 100_000, health: Node_Health.HEALTHY, since: 12_000 },
    { name: "an older heartbeat is HEARTBEAT_TIMEOUT", lastBeatMs: 87_999, leaderSinceMs: 0, nowMs: 100_000, health: Node_Health.HEARTBEAT_TIMEOUT, since: 12_001 },
    { name: "no heartbeat during the grace period is UNKNOWN", leaderSinceMs: 95_000, nowMs: 100_000, health: Node_Health.UNKNOWN },
    { name: "no heartbeat after the grace period is HEARTBEAT_TIMEOUT", leaderSinceMs: 80_000, nowMs: 100_000, health: Node_Health.HEARTBEAT_TIMEOUT },
    { name: "a heartbeat during the grace period counts at once", lastBeatMs: 99_000, leaderSinceMs: 98_000, nowMs: 100_000, health: Node_Health.HEALTHY, since: 1_000 },
    { name: "a node that is not UP is UNKNOWN", state: NodeState.NEW, leaderSinceMs: 0, nowMs: 100_000, health: Node_Health.UNKNOWN },
    { name: "a STANDBY node is UNKNOWN even after a heartbeat", state: NodeState.STANDBY, lastBeatMs: 99_000, leaderSinceMs: 0, nowMs: 100_000, health: Node_Health.UNKNOWN, since: 1_000 },
  ];
  for (const c of cases) {
    test(c.name, () => {
      const result = healthOf({ state: c.state ?? NodeState.UP, lastBeatMs: c.lastBeatMs, leaderSinceMs: c.leaderSinceMs, nowMs: c.nowMs, timeoutMs: TIMEOUT });
      expect(result.health).toBe(c.health);
      expect(result.sinceBeatMs).toBe(c.since);
    });
  }
});

describe("heartbeat tracker", () => {
  test("a new term forgets every heartbeat and starts a new grace period", () => {
    let now = 0;
    const tracker = new HeartbeatTracker(() => now, TIMEOUT);
    tracker.beat("node-a");
    now = 5_000;
    expect(tracker.health("node-a", NodeState.UP).health).toBe(Node_Health.HEALTHY);
    now = 30_000;
    expect(tracker.health("node-a", NodeState.UP).health).toBe(Node_Health.HEARTBEAT_TIMEOUT);
    tracker.newTerm();
    expect(tracker.health("node-a", NodeState.UP)).toEqual({ health: Node_Health.UNKNOWN });
    now = 30_000 + TIMEOUT;
    expect(tracker.health("node-a", NodeState.UP).health).toBe(Node_Health.HEARTBEAT_TIMEOUT);
  });

  test("a forgotten node has no heartbeat", () => {
    let now = 50_000;
    const tracker = new HeartbeatTracker(() => now, TIMEOUT);
    now = 70_000;
    tracker.beat("node-a");
    tracker.forget("node-a");
    expect(tracker.health("node-a", NodeState.UP)).toEqual({ health: Node_Health.HEARTBEAT_TIMEOUT });
  });
});
