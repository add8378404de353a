// How the CLI shows nodes: a table for people, JSON for machines.

import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { Node_Health, type Node } from "../../proto/gen/api/management_pb.ts";

export function rolesOf(node: Node): string[] {
  const roles: string[] = [];
  if (node.roles?.consensusMember) roles.push("consensus");
  if (node.roles?.kubernetesController) roles.push("kubernetes-controller");
  if (node.roles?.kubernetesWorker) roles.push("kubernetes-worker");
  return roles;
}

export interface NodeSummary {
  id: string;
  state: string;
  address: string;
  roles: string[];
  curator: boolean;
  /** The owner's labels, key=value, sorted by key. */
  labels: string[];
  /** HEALTHY, DEGRADED, CLOCK_SKEW, HEARTBEAT_TIMEOUT or UNKNOWN, as the curator leader sees it. */
  health: string;
  /** Why the node is DEGRADED (what keeps failing on it) or CLOCK_SKEW. */
  healthReason?: string;
  /** The node's clock less the curator leader's, from its heartbeats, if known. */
  clockOffsetMs?: number;
  /** Milliseconds since the leader last heard the node's heartbeat, if it has. */
  lastSeenMs?: number;
  lastStatusMs?: number;
  /** When the node's current boot began (ms since the epoch), as it reported. */
  bootMs?: number;
  /** The node software's version, as it reported. */
  version?: string;
  /** The Kubernetes version its software carries, as it reported. */
  kubernetesVersion?: string;
  /** The system slot it runs (a VM's: a or b). */
  slot?: string;
  /** Its last update that did not take, as it reported (until that slot is written again). */
  updateFailure?: { version: string; reason: string; timeMs: number };
  services: { name: string; state: string; message: string }[];
}

export function summarize(node: Node): NodeSummary {
  return {
    id: node.id,
    state: NodeState[node.state] ?? String(node.state),
    address: node.status?.externalAddress ?? "",
    roles: rolesOf(node),
    curator: Boolean(node.status?.runningCurator),
    labels: node.labels.map((l) => `${l.key}=${l.value}`),
    health: Node_Health[node.health] ?? String(node.health),
    ...(node.healthReason ? { healthReason: node.healthReason } : {}),
    ...(node.timeSinceHeartbeatMs !== undefined ? { lastSeenMs: Number(node.timeSinceHeartbeatMs) } : {}),
    ...(node.clockOffsetMs !== undefined ? { clockOffsetMs: Number(node.clockOffsetMs) } : {}),
    ...(node.status?.timestampMs ? { lastStatusMs: Number(node.status.timestampMs) } : {}),
    ...(node.status?.bootMs ? { bootMs: Number(node.status.bootMs) } : {}),
    ...(node.status?.version ? { version: node.status.version } : {}),
    ...(node.status?.slot ? { slot: node.status.slot } : {}),
    ...(node.status?.kubernetesVersion ? { kubernetesVersion: node.status.kubernetesVersion } : {}),
    ...(node.status?.updateFailure
      ? { updateFailure: { version: node.status.updateFailure.version, reason: node.status.updateFailure.reason, timeMs: Number(node.status.updateFailure.timeMs) } }
      : {}),
    services: (node.status?.services ?? []).map((s) => ({ name: s.name, state: s.state, message: s.message })),
  };
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

/** A clock offset against the curator leader's, as people read it. */
export function describeOffset(ms: number): string {
  if (Math.abs(ms) < 1_000) return `within 1s of the curator leader's (${Math.round(ms)}ms)`;
  return `${formatDuration(Math.abs(ms))} ${ms > 0 ? "ahead of" : "behind"} the curator leader's`;
}

/** A size in MiB, one decimal: "12.3 MiB". */
export function mib(bytes: number): string {
  return `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
}

/** Rows as aligned columns for people: two spaces apart, the last column unpadded. */
export function alignColumns(rows: readonly (readonly string[])[]): string[] {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  return rows.map((r) =>
    r
      .map((cell, i) => (i === r.length - 1 ? cell : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd(),
  );
}

export function nodeTable(nodes: NodeSummary[]): string {
  const rows = [
    ["NODE", "STATE", "HEALTH", "LAST SEEN", "ADDRESS", "ROLES", "LABELS"],
    ...nodes.map((n) => [n.id, n.state, n.health, n.lastSeenMs === undefined ? "-" : `${formatDuration(n.lastSeenMs)} ago`, n.address || "-", n.roles.join(",") || "-", n.labels.join(",") || "-"]),
  ];
  const table = alignColumns(rows);
  // Why a node is DEGRADED, under the table: one line each.
  const reasons = nodes.filter((n) => n.healthReason).map((n) => `${n.id} is ${n.health}: ${n.healthReason}`);
  return [...table, ...(reasons.length ? ["", ...reasons] : [])].join("\n");
}

/**
 * One node as `ctl node describe` shows it: its record, then every line its
 * services report (the mesh's peers, kube-proxy, the cluster DNS, ...),
 * state and message, as the node last pushed them.
 */
export function describeNode(node: NodeSummary, now = Date.now()): string {
  const fields: [string, string][] = [
    ["Node", node.id],
    ["State", node.state],
    ["Health", node.healthReason ? `${node.health}: ${node.healthReason}` : node.health],
    ["Last seen", node.lastSeenMs === undefined ? "-" : `${formatDuration(node.lastSeenMs)} ago`],
    ["Clock", node.clockOffsetMs === undefined ? "-" : describeOffset(node.clockOffsetMs)],
    ["Address", node.address || "-"],
    ["Roles", node.roles.join(", ") || "-"],
    ["Curator", node.curator ? "running" : "-"],
    ["Labels", node.labels.join(", ") || "-"],
    ["Version", node.version ? `${node.version}${node.slot ? ` (slot ${node.slot})` : ""}` : "-"],
    ["Kubernetes", node.kubernetesVersion ?? "-"],
    ...(node.updateFailure ? [["Update failed", `${node.updateFailure.version} at ${new Date(node.updateFailure.timeMs).toISOString()}: ${node.updateFailure.reason}`] as [string, string]] : []),
    ["Booted", node.bootMs ? `${new Date(node.bootMs).toISOString()} (up ${formatDuration(now - node.bootMs)})` : "-"],
    ["Status from", node.lastStatusMs ? `${formatDuration(now - node.lastStatusMs)} ago` : "-"],
  ];
  const width = Math.max(...fields.map(([k]) => k.length)) + 1;
  const head = fields.map(([k, v]) => `${`${k}:`.padEnd(width)} ${v}`);
  const nameWidth = Math.max(7, ...node.services.map((s) => s.name.length));
  const stateWidth = Math.max(5, ...node.services.map((s) => s.state.length));
  const services = node.services.map((s) => `  ${s.name.padEnd(nameWidth)}  ${s.state.padEnd(stateWidth)}  ${s.message}`.trimEnd());
  return [...head, "", "Services:", ...(services.length ? services : ["  (none reported)"])].join("\n");
}

/** CLI role names → UpdateNodeRoles fields. */
export const ROLE_FIELDS = {
  consensus: "consensusMember",
  "kubernetes-controller": "kubernetesController",
  "kubernetes-worker": "kubernetesWorker",
} as const;

export type RoleName = keyof typeof ROLE_FIELDS;

/**
 * Label arguments as kubectl takes them: `key=value` sets a label (the value
 * may be empty), `key-` removes one. Throws an Error naming the argument
 * that is neither; the syntax of keys and values is the curator's to check.
 */
export function parseLabelArgs(args: readonly string[]): { upsert: { key: string; value: string }[]; remove: string[] } {
  const upsert: { key: string; value: string }[] = [];
  const remove: string[] = [];
  for (const arg of args) {
    const eq = arg.indexOf("=");
    if (eq > 0) upsert.push({ key: arg.slice(0, eq), value: arg.slice(eq + 1) });
    else if (eq < 0 && arg.length > 1 && arg.endsWith("-")) remove.push(arg.slice(0, -1));
    else throw new Error(`'${arg}' is neither key=value (set a label) nor key- (remove one)`);
  }
  return { upsert, remove };
}

/**
 * The nodes that match every term of `expression` (comma-separated):
 * state=UP, role=consensus, health=DEGRADED, or a label (key=value, or
 * key alone: has the label). Throws a one-line reason for a bad term.
 */
export function filterNodes(nodes: readonly NodeSummary[], expression: string): NodeSummary[] {
  const terms = expression.split(",").map((t) => t.trim());
  const tests = terms.map((term): ((n: NodeSummary) => boolean) => {
    const at = term.indexOf("=");
    const key = at < 0 ? term : term.slice(0, at);
    const value = at < 0 ? undefined : term.slice(at + 1);
    if (!/^[A-Za-z0-9][-A-Za-z0-9_./]{0,252}$/.test(key))
      throw new FilterError(`${JSON.stringify(term.slice(0, 80))} is no filter term: use state=UP, role=consensus, health=HEALTHY, or a label key=value`);
    if (key === "state") return (n) => n.state === value?.toUpperCase();
    if (key === "health") return (n) => n.health === value?.toUpperCase();
    if (key === "role") return (n) => value !== undefined && n.roles.includes(value);
    return value === undefined ? (n) => n.labels.some((l) => l.startsWith(`${key}=`)) : (n) => n.labels.includes(`${key}=${value}`);
  });
  return nodes.filter((n) => tests.every((t) => t(n)));
}

export class FilterError extends Error {
  override name = "FilterError";
}
