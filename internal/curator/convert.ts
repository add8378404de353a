// The one place where curator state becomes wire messages (and back).

import { create } from "@bufbuild/protobuf";
import { Node_Health, NodeSchema as ApiNodeSchema, type Node as ApiNode } from "../../proto/gen/api/management_pb.ts";
import { NodeSchema as CuratorNodeSchema, type Node as CuratorNode } from "../../proto/gen/curator/curator_pb.ts";
import type { NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import { MAX_CLOCK_SKEW_MS, type Health } from "./heartbeats.ts";

/**
 * The service line in which a node says which of its runnables keep failing
 * (state "ok" or "degraded"; cmd/init/node.ts reports it).
 */
export const SUPERVISION_LINE = "supervision";

/**
 * The state of a service line that reports a condition the node cannot
 * mend by restarting anything (etcd out of its quota): it makes the node
 * DEGRADED, as the supervision line's "degraded" does.
 */
export const FAILING_STATE = "failing";

/**
 * A node's health as the owner sees it: the leader's heartbeat verdict,
 * made CLOCK_SKEW when its clock is too far from the leader's, or DEGRADED, with the node's own words, when heartbeats arrive but the
 * node says part of it keeps failing (its supervision line, or any line
 * in FAILING_STATE).
 */
function healthOf(record: NodeRecord, health: Health): { health: Node_Health; reason: string } {
  if (health.health === Node_Health.HEALTHY && health.clockOffsetMs !== undefined && Math.abs(health.clockOffsetMs) > MAX_CLOCK_SKEW_MS) {
    const off = health.clockOffsetMs;
    return {
      health: Node_Health.CLOCK_SKEW,
      reason: `its clock is ${(Math.abs(off) / 1000).toFixed(1)} s ${off > 0 ? "ahead of" : "behind"} the curator leader's (at most ${MAX_CLOCK_SKEW_MS / 1000} s allowed)`,
    };
  }
  const services = record.status?.services ?? [];
  const supervision = services.find((s) => s.name === SUPERVISION_LINE);
  const reasons = [
    ...(supervision?.state === "degraded" ? [supervision.message] : []),
    ...services.filter((s) => s.name !== SUPERVISION_LINE && s.state === FAILING_STATE).map((s) => `${s.name}: ${s.message}`),
  ];
  if (health.health === Node_Health.HEALTHY && reasons.length) return { health: Node_Health.DEGRADED, reason: reasons.join("; ") };
  return { health: health.health, reason: "" };
}

/** A node as the owner sees it, with its health as the leader knows it: never its unlock key or join key. */
export function toApiNode(record: NodeRecord, health: Health): ApiNode {
  const verdict = healthOf(record, health);
  return create(ApiNodeSchema, {
    id: record.id,
    publicKey: record.publicKey,
    state: record.state,
    ...(record.status ? { status: record.status } : {}),
    ...(record.roles ? { roles: record.roles } : {}),
    labels: record.labels,
    health: verdict.health,
    healthReason: verdict.reason,
    ...(health.sinceBeatMs !== undefined ? { timeSinceHeartbeatMs: BigInt(Math.round(health.sinceBeatMs)) } : {}),
    ...(health.clockOffsetMs !== undefined ? { clockOffsetMs: BigInt(Math.round(health.clockOffsetMs)) } : {}),
  });
}

/** A node as other nodes see it through Watch. */
export function toCuratorNode(record: NodeRecord): CuratorNode {
  return create(CuratorNodeSchema, {
    id: record.id,
    publicKey: record.publicKey,
    joinKey: record.joinKey,
    state: record.state,
    ...(record.status ? { status: record.status } : {}),
    ...(record.roles ? { roles: record.roles } : {}),
    ...(record.clusterNetworking ? { clusterNetworking: record.clusterNetworking } : {}),
  });
}
