// `ctl events [-f] [--node ID] [-n N]`: the cluster's audit trail
// (internal/curator/audit.ts), read from any curator. Following survives a
// curator going away: ctl asks another one, and skips what it printed.

import { ClusterEvent_Kind, Management, type ClusterEvent } from "../../proto/gen/api/management_pb.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import type { OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import { explain } from "./explain.ts";
import type { CallSettings } from "./nodes.ts";

/** How long a follower waits before it asks again after its curator went away. */
const FOLLOW_RETRY_MS = 1_000;
/** Refusals that asking again cannot mend. */
const FINAL = new Set<number>([Status.INVALID_ARGUMENT, Status.PERMISSION_DENIED, Status.UNAUTHENTICATED]);

/** An event as ctl prints it in JSON. */
export interface EventRow {
  time: string;
  kind: string;
  actor: string;
  method: string;
  node: string;
  detail: string;
  result: string;
}

export function eventRow(event: ClusterEvent): EventRow {
  return {
    time: new Date(Number(event.timeMs)).toISOString(),
    kind: (ClusterEvent_Kind[event.kind] ?? String(event.kind)).toLowerCase(),
    actor: event.actor,
    method: event.method,
    node: event.nodeId,
    detail: event.detail,
    result: event.result,
  };
}

/** One line for people: time, kind, who, what, which node, then what was asked and how it ended. */
export function eventLine(row: EventRow): string {
  return [row.time, row.kind.padEnd(7), row.actor, row.method || "-", row.node || "-", row.detail, row.result].filter((part, i) => i < 5 || part).join("  ");
}

/** Reads the trail and, with follow, everything recorded after, until the signal aborts. */
export async function readEvents(
  credentials: OwnerCredentials,
  request: { last: number; nodeId: string; follow: boolean },
  settings: CallSettings & { signal: AbortSignal; print: (event: ClusterEvent) => void; note: (line: string) => void },
): Promise<void> {
  // What was printed last: its time, and the events printed at that very time (several share a millisecond).
  let lastTimeMs = -1n;
  let atLastTime = new Set<string>();
  let away = false;
  const keyOf = (e: ClusterEvent) => `${e.kind}\u0000${e.actor}\u0000${e.method}\u0000${e.nodeId}\u0000${e.detail}\u0000${e.result}`;
  for (;;) {
    try {
      await withFailover(
        Management,
        credentials,
        async (m) => {
          for await (const event of m.getEvents(request, { signal: settings.signal, ...(request.follow ? {} : { timeoutMs: settings.timeoutMs }) })) {
            if (away) {
              settings.note("following the events again");
              away = false;
            }
            // After a reconnect the backlog repeats what was printed: skipped.
            if (event.timeMs < lastTimeMs || (event.timeMs === lastTimeMs && atLastTime.has(keyOf(event)))) continue;
            if (event.timeMs !== lastTimeMs) {
              lastTimeMs = event.timeMs;
              atLastTime = new Set();
            }
            atLastTime.add(keyOf(event));
            settings.print(event);
          }
        },
        settings.progress,
      );
      if (!request.follow || settings.signal.aborted) return;
      throw new Error("the curator ended the event stream");
    } catch (err) {
      if (settings.signal.aborted) return;
      if (!request.follow) throw err;
      if (err instanceof RpcError && FINAL.has(err.code)) throw err;
      if (!away) settings.note(`the event stream ended (${explain(err).line}); following again through any curator`);
      away = true;
      await Bun.sleep(FOLLOW_RETRY_MS);
    }
  }
}
