// The owner's view of etcd across the cluster: each consensus node is asked
// about its own member through its node management service (a member's
// client port listens on its node's loopback only), and defragmentation
// goes one member at a time, the raft leader last, so the cluster keeps a
// quorum while a member is blocked.

import { formatBytes } from "../log/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { explain } from "./explain.ts";
import { alignColumns, type NodeSummary } from "./format.ts";
import { withListedNode } from "./node_management.ts";
import { listNodes, nameOf, type CallSettings } from "./nodes.ts";

/** One consensus node's member, or why it did not answer. */
export interface EtcdMemberRow {
  node: string;
  /** The node with its name label, as people read it. */
  name: string;
  memberId: string;
  /** leader, follower or learner, as the member itself sees it; "" if it did not answer. */
  role: string;
  dbSizeBytes: number;
  dbSizeInUseBytes: number;
  quotaBytes: number;
  revision: number;
  raftTerm: number;
  alarms: string[];
  errors: string[];
  /** Set when the node could not be asked. */
  error?: string;
}

/** Deadline of one defragmentation: it rewrites the member's whole file, slowly under emulation. */
export const DEFRAG_TIMEOUT_MS = 10 * 60_000;

function consensusNodes(nodes: NodeSummary[]): NodeSummary[] {
  return nodes.filter((n) => n.roles.includes("consensus"));
}

/** Every consensus node's member, asked at once. */
export async function etcdStatus(credentials: OwnerCredentials, settings: CallSettings): Promise<EtcdMemberRow[]> {
  return membersOf(credentials, settings, consensusNodes(await listNodes(credentials, settings)));
}

/** The members of `nodes` (consensus nodes of the node list), each asked at once. */
async function membersOf(credentials: OwnerCredentials, settings: CallSettings, nodes: readonly NodeSummary[]): Promise<EtcdMemberRow[]> {
  if (nodes.length === 0) throw new OperatorError("the cluster lists no node with the consensus role");
  return Promise.all(
    nodes.map(async (node): Promise<EtcdMemberRow> => {
      const base = { node: node.id, name: nameOf(node) };
      try {
        const s = await withListedNode(credentials, node, (client) => client.getEtcdStatus({}, { timeoutMs: settings.timeoutMs }));
        return {
          ...base,
          memberId: s.memberId,
          role: s.isLearner ? "learner" : s.leaderId === s.memberId ? "leader" : "follower",
          dbSizeBytes: Number(s.dbSizeBytes),
          dbSizeInUseBytes: Number(s.dbSizeInUseBytes),
          quotaBytes: Number(s.quotaBytes),
          revision: Number(s.revision),
          raftTerm: Number(s.raftTerm),
          alarms: s.alarms,
          errors: s.errors,
        };
      } catch (err) {
        return { ...base, memberId: "", role: "", dbSizeBytes: 0, dbSizeInUseBytes: 0, quotaBytes: 0, revision: 0, raftTerm: 0, alarms: [], errors: [], error: explain(err).line };
      }
    }),
  );
}

/** The members as a table, the cluster's alarms under it. */
export function etcdStatusTable(rows: readonly EtcdMemberRow[]): string {
  const table = [
    ["NODE", "MEMBER", "ROLE", "DB SIZE", "IN USE", "QUOTA", "REVISION", "TERM"],
    ...rows.map((r) =>
      r.error
        ? [r.name, "-", "-", "-", "-", "-", "-", `not answering: ${r.error}`]
        : [r.name, r.memberId, r.role, formatBytes(r.dbSizeBytes), formatBytes(r.dbSizeInUseBytes), formatBytes(r.quotaBytes), String(r.revision), String(r.raftTerm)],
    ),
  ];
  const lines = alignColumns(table);
  const alarms = [...new Set(rows.flatMap((r) => r.alarms))];
  lines.push(alarms.length ? `alarms: ${alarms.join(", ")}` : "alarms: none");
  for (const r of rows) for (const e of r.errors) lines.push(`${r.name}: ${e}`);
  return lines.join("\n");
}

export interface DefragRow {
  node: string;
  name: string;
  beforeBytes: number;
  afterBytes: number;
  tookMs: number;
}

/**
 * Defragments the members of `only` (node IDs; all consensus nodes if
 * empty), one after the other, followers first and the raft leader last;
 * says each step through `progress`. Stops at the first failure, naming it.
 */
export async function defragmentEtcd(credentials: OwnerCredentials, settings: CallSettings, only: readonly string[], progress: (line: string) => void): Promise<DefragRow[]> {
  const all = consensusNodes(await listNodes(credentials, settings));
  const unknown = only.filter((id) => !all.some((n) => n.id === id));
  if (unknown.length) throw new OperatorError(`not a consensus node: ${unknown.join(", ")} (consensus nodes: ${all.map(nameOf).join(", ") || "none"})`);
  const chosen = only.length ? all.filter((n) => only.includes(n.id)) : all;
  const statuses = await membersOf(credentials, settings, all);
  const leader = statuses.find((s) => s.role === "leader")?.node;
  const order = [...chosen.filter((n) => n.id !== leader), ...chosen.filter((n) => n.id === leader)];
  const done: DefragRow[] = [];
  for (const [i, node] of order.entries()) {
    progress(`defragmenting ${nameOf(node)}${node.id === leader ? " (the raft leader)" : ""}, ${i + 1} of ${order.length} ...`);
    const answer = await withListedNode(credentials, node, (client) => client.defragmentEtcd({}, { timeoutMs: Math.max(settings.timeoutMs, DEFRAG_TIMEOUT_MS) })).catch((err: unknown) => {
      throw new OperatorError(`defragmenting ${nameOf(node)} failed${done.length ? ` (done before it: ${done.map((d) => d.name).join(", ")})` : ""}: ${explain(err).line}`);
    });
    const row = { node: node.id, name: nameOf(node), beforeBytes: Number(answer.beforeBytes), afterBytes: Number(answer.afterBytes), tookMs: Number(answer.tookMs) };
    progress(`${row.name}: ${formatBytes(row.beforeBytes)} → ${formatBytes(row.afterBytes)} in ${(row.tookMs / 1000).toFixed(1)} s`);
    done.push(row);
  }
  return done;
}
