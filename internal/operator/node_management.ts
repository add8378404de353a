// Reaching one node as the owner: find it by ID in the curator's node list,
// then call its management service (internal/nodemgmt) directly, mutual TLS
// with the owner certificate; the node must present its own certificate.

import type { LogEntry, NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import { formatText } from "../log/mod.ts";
import { WIRE_LEVELS, dialNodeManagement, levelOfWire } from "../nodemgmt/client/mod.ts";
import { RpcError, Status, type ServiceClient } from "../rpc/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { alignColumns, formatDuration, type NodeSummary } from "./format.ts";
import { listNodes, type CallSettings } from "./nodes.ts";

export type NodeManagementClient = ServiceClient<typeof NodeManagement>;

/** Level names as ctl takes them (--level), to the wire. */
export const LOG_LEVELS = WIRE_LEVELS;

/**
 * Runs `call` with a client of node `id`'s management service. The node is
 * looked up in the node list; it must be UP and have reported an address.
 */
export async function withNode<T>(credentials: OwnerCredentials, id: string, call: (client: NodeManagementClient) => Promise<T>, settings: CallSettings): Promise<T> {
  const nodes = await listNodes(credentials, settings);
  const node = nodes.find((n) => n.id === id);
  if (!node) throw new OperatorError(`the cluster has no node ${id} (nodes: ${nodes.map((n) => n.id).join(", ") || "none"})`);
  return withListedNode(credentials, node, call);
}

/** withNode for a node already looked up in the node list. */
export async function withListedNode<T>(credentials: OwnerCredentials, node: NodeSummary, call: (client: NodeManagementClient) => Promise<T>): Promise<T> {
  if (node.state !== "UP") throw new OperatorError(`node ${node.id} is ${node.state}: only nodes that are UP serve node management`);
  if (!node.address) throw new OperatorError(`node ${node.id} has not reported its address yet`);
  const client = dialNodeManagement(node.id, node.address, { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey });
  try {
    return await call(client);
  } finally {
    client.close();
  }
}

/** One log entry as a line, in the same form as the node's console. */
export function formatLogEntry(entry: LogEntry): string {
  return formatText({
    time: new Date(Number(entry.timeMs)),
    level: levelOfWire(entry.level) ?? "info",
    component: entry.path,
    message: entry.message,
    fields: Object.fromEntries(entry.fields.map((f) => [f.key, f.value])),
  });
}

/** One log entry as plain JSON: time as ISO text, fields as an object. */
export function logEntryJson(entry: LogEntry): Record<string, unknown> {
  return {
    time: new Date(Number(entry.timeMs)).toISOString(),
    level: levelOfWire(entry.level) ?? "info",
    path: entry.path,
    msg: entry.message,
    fields: Object.fromEntries(entry.fields.map((f) => [f.key, f.value])),
  };
}

export interface ServiceRow {
  path: string;
  state: string;
  restarts: number;
  lastError: string;
  sinceMs: number;
}

export function serviceTable(rows: ServiceRow[]): string {
  const table = [["SERVICE", "STATE", "RESTARTS", "SINCE", "LAST ERROR"], ...rows.map((r) => [r.path, r.state, String(r.restarts), formatDuration(r.sinceMs), r.lastError || "-"])];
  return alignColumns(table).join("\n");
}

/** How long a follower waits before looking for a node that went away again. */
const FOLLOW_RETRY_MS = 1_000;

/** Refusals that following again would only repeat: the request, or the caller, is wrong. */
const FINAL_CODES = new Set([Status.INVALID_ARGUMENT, Status.PERMISSION_DENIED, Status.UNAUTHENTICATED, Status.NOT_FOUND, Status.RESOURCE_EXHAUSTED]);

/**
 * Reads node `id`'s logs (GetLogs with `request`), handing each entry to
 * `print`. Without follow, one read. With follow, until `signal` aborts: a
 * node that goes away (reboots, restarts, is unreachable for a while) is
 * said to have gone through `note`, and followed again once it is back,
 * without printing an entry twice. A refusal, or a node the cluster no
 * longer has, ends it with that error.
 */
export async function readLogs(
  credentials: OwnerCredentials,
  id: string,
  request: { path: string; subtree: boolean; backlog: number; follow: boolean; minLevel?: number; boot?: number },
  settings: CallSettings & { signal: AbortSignal; print: (entry: LogEntry) => void; note: (line: string) => void },
): Promise<void> {
  // What was printed last: its time, and how often each entry was printed at that very time (several share a millisecond).
  let lastTimeMs = -1n;
  let atLastTime = new Map<string, number>();
  let away = false;
  for (;;) {
    try {
      await withNode(
        credentials,
        id,
        async (client) => {
          const ask = away ? { ...request, backlog: -1 } : request;
          // After a node came back, its backlog repeats what was printed before it went (a node process keeps its log rings): skipped, once each.
          let replaying = away;
          const replayed = new Map(atLastTime);
          for await (const response of client.getLogs(ask, { signal: settings.signal, ...(request.follow ? {} : { timeoutMs: settings.timeoutMs }) })) {
            if (away) {
              settings.note(`${id} is back; following its logs again`);
              away = false;
            }
            if (response.pastBoot) {
              const p = response.pastBoot;
              const ended = p.endedMs ? `ended ${new Date(Number(p.endedMs)).toISOString()}: ${p.endCause}` : "its end is not known";
              settings.note(
                `boot ${request.boot} of ${id}: began ${new Date(Number(p.bootMs)).toISOString()}${p.version ? ` (nodecore ${p.version})` : ""}, ${ended}${p.skipped ? `; ${p.skipped} damaged lines skipped` : ""}`,
              );
            }
            for (const entry of response.entries) {
              const key = `${entry.path}\u0000${entry.message}`;
              if (replaying && entry.timeMs > lastTimeMs) replaying = false;
              if (replaying) {
                const left = replayed.get(key) ?? 0;
                if (entry.timeMs < lastTimeMs || left > 0) {
                  if (entry.timeMs === lastTimeMs) replayed.set(key, left - 1);
                  continue;
                }
              }
              if (entry.timeMs !== lastTimeMs) {
                lastTimeMs = entry.timeMs;
                atLastTime = new Map();
              }
              atLastTime.set(key, (atLastTime.get(key) ?? 0) + 1);
              settings.print(entry);
            }
          }
        },
        settings,
      );
      if (!request.follow || settings.signal.aborted) return;
      throw new Error("its log stream ended");
    } catch (err) {
      if (settings.signal.aborted || !request.follow) {
        if (settings.signal.aborted) return;
        throw err;
      }
      if (err instanceof RpcError && FINAL_CODES.has(err.code)) throw err;
      if (err instanceof OperatorError && err.message.startsWith("the cluster has no node")) throw err;
      if (!away) settings.note(`${id} went away (${err instanceof RpcError ? err.details : (err as Error).message}); following it again once it is back`);
      away = true;
      await Bun.sleep(FOLLOW_RETRY_MS);
    }
  }
}
