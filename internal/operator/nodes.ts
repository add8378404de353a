// The owner's calls about nodes: the list, and approval, which looks at the
// node before and after so that it can say what it did.

import { Management } from "../../proto/gen/api/management_pb.ts";
import type { OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import { summarize, type NodeSummary } from "./format.ts";

export interface CallSettings {
  timeoutMs: number;
  progress?: (line: string) => void;
}

/** Every node of the cluster, as GetNodes lists them. */
export async function listNodes(credentials: OwnerCredentials, settings: CallSettings): Promise<NodeSummary[]> {
  return withFailover(
    Management,
    credentials,
    async (m) => {
      const all: NodeSummary[] = [];
      for await (const node of m.getNodes({}, { timeoutMs: settings.timeoutMs })) all.push(summarize(node));
      return all;
    },
    settings.progress,
  );
}

/** What approving a node did: its state before and after (undefined: not listed), and whether it was approved now. */
export interface Approval {
  node: string;
  before: string | undefined;
  after: string | undefined;
  approved: boolean;
}

/** States in which a node has been approved already: approving it again changes nothing. */
const APPROVED_STATES: readonly string[] = ["STANDBY", "UP"];

/**
 * Approves a NEW node. A node that is STANDBY or UP already is left
 * alone, and the answer says so; one the cluster does not list is still
 * sent to ApproveNode, whose refusal (not found, decommissioned) is the
 * error. The states come from GetNodes, before and after.
 */
export async function approveNode(credentials: OwnerCredentials, request: { id: string } & CallSettings): Promise<Approval> {
  const { id, ...settings } = request;
  const stateOf = async () => (await listNodes(credentials, settings)).find((n) => n.id === id)?.state;
  const before = await stateOf();
  if (before !== undefined && APPROVED_STATES.includes(before)) return { node: id, before, after: before, approved: false };
  await withFailover(Management, credentials, (m) => m.approveNode({ id }, { timeoutMs: settings.timeoutMs }), settings.progress);
  return { node: id, before, after: await stateOf(), approved: true };
}
