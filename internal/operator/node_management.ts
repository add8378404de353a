// Reaching one node as the owner: find it by ID in the curator's node list,
// then call its management service (internal/nodemgmt) directly, mutual TLS
// with the owner certificate; the node must present its own certificate.

import { Management, type Node } from "../../proto/gen/api/management_pb.ts";
import { LogLevel, type LogEntry } from "../../proto/gen/api/node_management_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { formatText, type Level } from "../log/mod.ts";
import { dialNodeManagement } from "../nodemgmt/mod.ts";
import type { ServiceClient } from "../rpc/mod.ts";
import type { NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";

export type NodeManagementClient = ServiceClient<typeof NodeManagement>;

/** Level names as ctl takes them (--level), to the wire. */
export const LOG_LEVELS: Record<Level, LogLevel> = { debug: LogLevel.DEBUG, info: LogLevel.INFO, warn: LogLevel.WARN, error: LogLevel.ERROR };
const LEVEL_NAMES = Object.fromEntries(Object.entries(LOG_LEVELS).map(([name, level]) => [level, name])) as Record<LogLevel, Level>;

/** The node's record, by ID; a clear error if the cluster does not know it. */
export async function findNode(credentials: OwnerCredentials, id: string, options: { timeoutMs: number; progress?: (line: string) => void }): Promise<Node> {
  const nodes = await withFailover(
    Management,
    credentials,
    async (m) => {
      const all: Node[] = [];
      for await (const node of m.getNodes({}, { timeoutMs: options.timeoutMs })) all.push(node);
      return all;
    },
    options.progress,
  );
  const node = nodes.find((n) => n.id === id);
  if (!node) {
    const known = nodes.map((n) => n.id).join(", ") || "none";
    throw new OperatorError(`the cluster has no node ${id} (nodes: ${known})`);
  }
  return node;
}

/**
 * Runs `call` with a client of node `id`'s management service. The node
 * must be UP and have reported an address.
 */
export async function withNode<T>(
  credentials: OwnerCredentials,
  id: string,
  call: (client: NodeManagementClient, node: Node) => Promise<T>,
  options: { timeoutMs: number; progress?: (line: string) => void },
): Promise<T> {
  const node = await findNode(credentials, id, options);
  if (node.state !== NodeState.UP) throw new OperatorError(`node ${id} is ${NodeState[node.state]}: only nodes that are UP serve node management`);
  const host = node.status?.externalAddress;
  if (!host) throw new OperatorError(`node ${id} has not reported its address yet`);
  const client = dialNodeManagement(id, host, { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey });
  try {
    return await call(client, node);
  } finally {
    client.close();
  }
}

/** One log entry as a line, in the same form as the node's console. */
export function formatLogEntry(entry: LogEntry): string {
  return formatText({
    time: new Date(Number(entry.timeMs)),
    level: LEVEL_NAMES[entry.level] ?? "info",
    component: entry.path,
    message: entry.message,
    fields: Object.fromEntries(entry.fields.map((f) => [f.key, f.value])),
  });
}

/** One log entry as plain JSON: time as ISO text, fields as an object. */
export function logEntryJson(entry: LogEntry): Record<string, unknown> {
  return {
    time: new Date(Number(entry.timeMs)).toISOString(),
    level: LEVEL_NAMES[entry.level] ?? "info",
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

/** Durations as people read them: 850ms, 12s, 4m10s, 3h02m, 2d04h. */
export function formatDuration(ms: number): string {
  if (ms < 1_000) return `${Math.round(ms)}ms`;
  const s = Math.floor(ms / 1_000);
  if (s < 60) return `${s}s`;
  if (s < 3_600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  if (s < 86_400) return `${Math.floor(s / 3_600)}h${String(Math.floor((s % 3_600) / 60)).padStart(2, "0")}m`;
  return `${Math.floor(s / 86_400)}d${String(Math.floor((s % 86_400) / 3_600)).padStart(2, "0")}h`;
}

export function serviceTable(rows: ServiceRow[]): string {
  const table = [
    ["SERVICE", "STATE", "RESTARTS", "SINCE", "LAST ERROR"],
    ...rows.map((r) => [r.path, r.state, String(r.restarts), formatDuration(r.sinceMs), r.lastError || "-"]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  return table.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n");
}
