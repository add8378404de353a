// The one place where curator state becomes wire messages (and back).

import { create } from "@bufbuild/protobuf";
import { NodeSchema as ApiNodeSchema, type Node as ApiNode } from "../../proto/gen/api/management_pb.ts";
import { NodeSchema as CuratorNodeSchema, type Node as CuratorNode } from "../../proto/gen/curator/curator_pb.ts";
import type { NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import type { Health } from "./heartbeats.ts";

/** A node as the owner sees it, with its health as the leader knows it: never its unlock key or join key. */
export function toApiNode(record: NodeRecord, health: Health): ApiNode {
  return create(ApiNodeSchema, {
    id: record.id,
    publicKey: record.publicKey,
    state: record.state,
    ...(record.status ? { status: record.status } : {}),
    ...(record.roles ? { roles: record.roles } : {}),
    labels: record.labels,
    health: health.health,
    ...(health.sinceBeatMs !== undefined ? { timeSinceHeartbeatMs: BigInt(Math.round(health.sinceBeatMs)) } : {}),
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
  });
}
