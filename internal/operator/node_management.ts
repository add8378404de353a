// Reaching one node as the owner: find it by ID in the curator's node list,
// then call its management service (internal/nodemgmt) directly, mutual TLS
// with the owner certificate; the node must present its own certificate.

import type { LogEntry, NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import { formatText } from "../log/mod.ts";
import { WIRE_LEVELS, dialNodeManagement, levelOfWire } from "../nodemgmt/mod.ts";
import type { ServiceClient } from "../rpc/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { formatDuration } from "./format.ts";
import { listNodes, type CallSettings } from "./nodes.ts";

export type NodeManagementClient = ServiceClient<typeof NodeManagement>;

/** Level names as ctl takes them (--level), to the wire. */
export const LOG_LEVELS = WIRE_LEVELS;

/**
 * Runs `call` with a client of node `id`'s management service. The node is
 * looked up in the node list; it must be UP and have reported an address.
 */
export async function withNode<T>(
  credentials: OwnerCredentials,
  id: string,
  call: (client: NodeManagementClient) => Promise<T>,
  settings: CallSettings,
): Promise<T> {
  const nodes = await listNodes(credentials, settings);
  const node = nodes.find((n) => n.id === id);
  if (!node) throw new OperatorError(`the cluster has no node ${id} (nodes: ${nodes.map((n) => n.id).join(", ") || "none"})`);
  if (node.state !== "UP") throw new OperatorError(`node ${id} is ${node.state}: only nodes that are UP serve node management`);
  if (!node.address) throw new OperatorError(`node ${id} has not reported its address yet`);
  const client = dialNodeManagement(id, node.address, { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey });
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
  const table = [
    ["SERVICE", "STATE", "RESTARTS", "SINCE", "LAST ERROR"],
    ...rows.map((r) => [r.path, r.state, String(r.restarts), formatDuration(r.sinceMs), r.lastError || "-"]),
  ];
  const widths = table[0]!.map((_, i) => Math.max(...table.map((r) => r[i]!.length)));
  return table.map((r) => r.map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!))).join("  ").trimEnd()).join("\n");
}
