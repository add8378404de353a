import { describe, expect, test } from "bun:test";
import { Node_Health } from "../../proto/gen/api/management_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { create } from "@bufbuild/protobuf";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { CLOCK_SAMPLES, HeartbeatTracker, MAX_CLOCK_SKEW_MS, healthOf } from "./heartbeats.ts";
import { toApiNode } from "./convert.ts";

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

describe("clock offsets from heartbeats", () => {
  test("the estimate is the least delayed of the last samples; delays never make a clock look ahead", () => {
    let wall = 1_800_000_000_000;
    const tracker = new HeartbeatTracker(
      () => 0,
      TIMEOUT,
      () => wall,
    );
    // The node's clock is 2 h behind; its updates arrive 40, 900, 15 and 3000 ms after they were sent.
    const behind = -2 * 3600_000;
    for (const delay of [40, 900, 15, 3_000]) {
      tracker.beat("node-a", wall + behind - delay);
      wall += 5_000;
    }
    expect(tracker.health("node-a", NodeState.UP).clockOffsetMs).toBe(behind - 15);
    // Only the last CLOCK_SAMPLES count: once the clock is set right, the old offset goes.
    for (let i = 0; i < CLOCK_SAMPLES; i++) {
      tracker.beat("node-a", wall - 20);
      wall += 5_000;
    }
    expect(tracker.health("node-a", NodeState.UP).clockOffsetMs).toBe(-20);
  });

  test("an update without a time, or with a nonsense one, gives no offset; a new term and a forgotten node forget it", () => {
    const wall = 1_800_000_000_000;
    const tracker = new HeartbeatTracker(
      () => 0,
      TIMEOUT,
      () => wall,
    );
    tracker.beat("node-a");
    tracker.beat("node-a", Number.MAX_SAFE_INTEGER);
    tracker.beat("node-a", -5);
    expect(tracker.health("node-a", NodeState.UP).clockOffsetMs).toBeUndefined();
    tracker.beat("node-a", wall + 1);
    expect(tracker.health("node-a", NodeState.UP).clockOffsetMs).toBe(1);
    tracker.newTerm();
    expect(tracker.health("node-a", NodeState.UP).clockOffsetMs).toBeUndefined();
    tracker.beat("node-b", wall + 1);
    tracker.forget("node-b");
    expect(tracker.health("node-b", NodeState.UP).clockOffsetMs).toBeUndefined();
  });

  test("a HEALTHY node whose clock is further off than allowed is CLOCK_SKEW, saying by how much and which way", () => {
    const record = create(NodeRecordSchema, { id: "node-a", state: NodeState.UP });
    const at = (clockOffsetMs: number) => toApiNode(record, { health: Node_Health.HEALTHY, sinceBeatMs: 1_000, clockOffsetMs });
    expect(at(MAX_CLOCK_SKEW_MS).health).toBe(Node_Health.HEALTHY);
    expect(at(-MAX_CLOCK_SKEW_MS).health).toBe(Node_Health.HEALTHY);
    const behind = at(-7_200_300);
    expect(behind.health).toBe(Node_Health.CLOCK_SKEW);
    expect(behind.healthReason).toBe(`its clock is 7200.3 s behind the curator leader's (at most ${MAX_CLOCK_SKEW_MS / 1000} s allowed)`);
    expect(behind.clockOffsetMs).toBe(-7_200_300n);
    expect(at(MAX_CLOCK_SKEW_MS + 1).healthReason).toStartWith("its clock is 10.0 s ahead of");
    // A node not heard from is not judged by an old offset.
    expect(toApiNode(record, { health: Node_Health.HEARTBEAT_TIMEOUT, clockOffsetMs: -7_200_300 }).health).toBe(Node_Health.HEARTBEAT_TIMEOUT);
  });
});
