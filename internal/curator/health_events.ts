// What the curator leader sees happen to nodes, for the audit trail
// (audit.ts): a node's health changing, and a node beginning a new boot.
// The leader looks every few seconds (server.ts) and records each change
// since its last look.
//
// A new leader knows no health at first (heartbeats.ts: every node is
// UNKNOWN through its grace period), so its first look is only a baseline,
// and a node becoming HEALTHY out of UNKNOWN is not news (each leader
// change would record every node). Out of UNKNOWN into anything else is:
// a node that was dead when the leader took over.

import { ClusterEvent_Kind } from "../../proto/gen/api/management_pb.ts";

export interface NodeLook {
  id: string;
  /** HEALTHY, DEGRADED, ... as GetNodes says it. */
  health: string;
  reason: string;
  /** When its current boot began, as it reported (0: not said). */
  bootMs: bigint;
}

export interface SeenEvent {
  kind: ClusterEvent_Kind;
  nodeId: string;
  detail: string;
}

export class HealthEvents {
  private last: Map<string, NodeLook> | undefined;

  /** Forgets what was seen: the next look is a baseline (call when this curator begins to lead). */
  reset(): void {
    this.last = undefined;
  }

  /** The changes since the last look. */
  observe(nodes: readonly NodeLook[]): SeenEvent[] {
    const before = this.last;
    this.last = new Map(nodes.map((n) => [n.id, n]));
    if (!before) return [];
    const events: SeenEvent[] = [];
    for (const node of nodes) {
      const was = before.get(node.id);
      if (!was) continue;
      if (was.bootMs && node.bootMs && node.bootMs !== was.bootMs) {
        events.push({ kind: ClusterEvent_Kind.BOOT, nodeId: node.id, detail: `began a new boot at ${new Date(Number(node.bootMs)).toISOString()}` });
      }
      // The reason alone changing (a restart count) is not a change of health.
      const changed = was.health !== node.health;
      const news = node.health !== "UNKNOWN" && !(was.health === "UNKNOWN" && node.health === "HEALTHY");
      if (changed && news) {
        events.push({ kind: ClusterEvent_Kind.HEALTH, nodeId: node.id, detail: `${was.health} → ${node.health}${node.reason ? `: ${node.reason}` : ""}` });
      }
    }
    return events;
  }
}
