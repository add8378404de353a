// Which changes the leader records: a baseline first, then health changes
// and new boots; nothing for a node becoming HEALTHY out of a new leader's
// UNKNOWN, nor for a reason that alone changed.

import { describe, expect, test } from "bun:test";
import { ClusterEvent_Kind } from "../../proto/gen/api/management_pb.ts";
import { HealthEvents, type NodeLook } from "./health_events.ts";

const look = (id: string, health: string, extra: Partial<NodeLook> = {}): NodeLook => ({ id, health, reason: "", bootMs: 1_000n, ...extra });

describe("health events", () => {
  test("the first look is a baseline; then each change of health, and each new boot, is one event", () => {
    const seen = new HealthEvents();
    expect(seen.observe([look("a", "HEALTHY"), look("b", "HEALTHY")])).toEqual([]);
    expect(seen.observe([look("a", "HEARTBEAT_TIMEOUT"), look("b", "DEGRADED", { reason: "etcd keeps failing (3 restarts)" })])).toEqual([
      { kind: ClusterEvent_Kind.HEALTH, nodeId: "a", detail: "HEALTHY → HEARTBEAT_TIMEOUT" },
      { kind: ClusterEvent_Kind.HEALTH, nodeId: "b", detail: "HEALTHY → DEGRADED: etcd keeps failing (3 restarts)" },
    ]);
    // The reason alone changing is no event; a new boot is.
    expect(seen.observe([look("a", "HEALTHY", { bootMs: 1_800_000_000_000n }), look("b", "DEGRADED", { reason: "etcd keeps failing (4 restarts)" })])).toEqual([
      { kind: ClusterEvent_Kind.BOOT, nodeId: "a", detail: "began a new boot at 2027-01-15T08:00:00.000Z" },
      { kind: ClusterEvent_Kind.HEALTH, nodeId: "a", detail: "HEARTBEAT_TIMEOUT → HEALTHY" },
    ]);
    // A node seen for the first time is no event (its approval is).
    expect(seen.observe([look("a", "HEALTHY", { bootMs: 1_800_000_000_000n }), look("b", "DEGRADED", { reason: "x" }), look("c", "HEALTHY")])).toEqual([]);
  });

  test("a new leader: a baseline again, and UNKNOWN → HEALTHY is not news, but UNKNOWN → HEARTBEAT_TIMEOUT is", () => {
    const seen = new HealthEvents();
    seen.observe([look("a", "HEALTHY"), look("b", "HEALTHY")]);
    seen.reset();
    expect(seen.observe([look("a", "UNKNOWN"), look("b", "UNKNOWN")])).toEqual([]);
    expect(seen.observe([look("a", "HEALTHY"), look("b", "HEARTBEAT_TIMEOUT")])).toEqual([{ kind: ClusterEvent_Kind.HEALTH, nodeId: "b", detail: "UNKNOWN → HEARTBEAT_TIMEOUT" }]);
    // Going to UNKNOWN (no longer UP) is no health event either.
    expect(seen.observe([look("a", "UNKNOWN"), look("b", "HEARTBEAT_TIMEOUT")])).toEqual([]);
  });
});
