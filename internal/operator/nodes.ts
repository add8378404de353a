// The owner's calls about nodes: the list, and approval, which looks at the
// node before and after so that it can say what it did.

import { Management } from "../../proto/gen/api/management_pb.ts";
import { NoCuratorError } from "../curator/client/mod.ts";
import type { OwnerCredentials } from "./config_dir.ts";
import { OperatorError } from "./config_dir.ts";
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

/** How long a long operation (a rollout) asks again for the node list when no curator answered it. */
export const LIST_PATIENCE_MS = 60_000;
const LIST_RETRY_MS = 2_000;

/**
 * Runs `list` (a read) again while no curator answers it, for up to
 * patienceMs: in a rollout that takes many minutes, a leader changing hands
 * or a call dropped by a busy curator is a moment, not the end. A curator
 * that cannot be trusted, and any answer that is not a failure to answer,
 * end it at once.
 */
export async function askPatiently<T>(list: () => Promise<T>, options: { patienceMs?: number; retryMs?: number; progress?: ((line: string) => void) | undefined } = {}): Promise<T> {
  const deadline = Date.now() + (options.patienceMs ?? LIST_PATIENCE_MS);
  for (;;) {
    try {
      return await list();
    } catch (err) {
      const cause = err instanceof NoCuratorError ? err : (err as Error)?.cause;
      const transient = cause instanceof NoCuratorError && cause.failures.length > 0 && cause.failures.every((f) => f.kind !== "untrusted" && f.kind !== "identity");
      if (!transient || Date.now() >= deadline) throw err;
      options.progress?.(`the cluster did not answer (${(err as Error).message.slice(0, 200)}); asking again`);
      await Bun.sleep(options.retryMs ?? LIST_RETRY_MS);
    }
  }
}

/** listNodes, asked again while no curator answers (askPatiently). */
export function listNodesPatiently(credentials: OwnerCredentials, settings: CallSettings): Promise<NodeSummary[]> {
  return askPatiently(() => listNodes(credentials, settings), { progress: settings.progress });
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

/** How long `ctl node reboot --wait` waits for the node to come back. */
export const REBOOT_WAIT_MS = 15 * 60_000;
/** How often it looks. */
const REBOOT_POLL_MS = 1_000;

/**
 * Polls the node list until `judge` accepts node `id`: judge returns true
 * when done, or says what it is waiting for (throws to stop at once). While
 * the node, or the cluster, is away, says so through `settings.progress`.
 * Throws, naming what it last saw, after `waitMs`.
 */
export async function waitForNode(
  credentials: OwnerCredentials,
  id: string,
  judge: (node: NodeSummary) => true | string,
  settings: CallSettings & { waitMs?: number; what: string },
): Promise<NodeSummary> {
  const started = Date.now();
  const deadline = started + (settings.waitMs ?? REBOOT_WAIT_MS);
  let last = "no answer from the cluster yet";
  for (;;) {
    let nodes: NodeSummary[] | undefined;
    try {
      nodes = await listNodes(credentials, { timeoutMs: settings.timeoutMs });
    } catch (err) {
      last = `the cluster does not answer (${(err as Error).message})`;
    }
    if (nodes) {
      const node = nodes.find((n) => n.id === id);
      if (!node) throw new OperatorError(`${id} is no longer in the cluster`);
      const verdict = judge(node);
      if (verdict === true) return node;
      last = verdict;
    }
    const elapsed = Date.now() - started;
    if (Date.now() >= deadline) throw new OperatorError(`${id} was not ${settings.what} within ${Math.round(elapsed / 1000)} s: ${last}`);
    settings.progress?.(`waiting for ${id} to be ${settings.what} (${Math.round(elapsed / 1000)} s): ${last}`);
    await Bun.sleep(REBOOT_POLL_MS);
  }
}

/**
 * Waits until node `id` is back from a reboot: it reports a boot that began
 * after `before` (its boot before the reboot), and the curator leader hears
 * its heartbeats (HEALTHY).
 */
export function waitUntilRebooted(credentials: OwnerCredentials, id: string, before: number | undefined, settings: CallSettings & { waitMs?: number }): Promise<NodeSummary> {
  return waitForNode(
    credentials,
    id,
    (node) => {
      const rebooted = node.bootMs !== undefined && node.bootMs > (before ?? 0);
      if (rebooted && node.health === "HEALTHY") return true;
      return rebooted ? `${id} booted again, its health is ${node.health}` : `${id} has not booted again yet (${node.health})`;
    },
    { ...settings, what: "back" },
  );
}

/** The label that names a node for people ("node1"): the launcher sets it, and ctl takes it wherever a node ID goes. */
export const NAME_LABEL = "name";

/**
 * The node the owner means by `typed`: a node ID, a unique prefix of one
 * (with or without "node-"), or a node's "name" label. Throws, naming the
 * candidates, when none or several match.
 */
export function resolveNode(nodes: readonly NodeSummary[], typed: string): string {
  const exact = nodes.find((n) => n.id === typed);
  if (exact) return exact.id;
  const named = nodes.filter((n) => n.labels.includes(`${NAME_LABEL}=${typed}`));
  if (named.length === 1) return named[0]!.id;
  const prefixed = nodes.filter((n) => typed.length > 0 && (n.id.startsWith(typed) || n.id.startsWith(`node-${typed}`)));
  if (prefixed.length === 1) return prefixed[0]!.id;
  const matches = named.length > 1 ? named : prefixed;
  if (matches.length > 1) throw new OperatorError(`'${typed}' matches ${matches.length} nodes (${matches.map((n) => n.id).join(", ")}); type more of the ID`);
  throw new OperatorError(`the cluster has no node '${typed}' (nodes: ${nodes.map((n) => nameOf(n)).join(", ") || "none"})`);
}

/** A node as people read it: its ID, and its name label in parentheses. */
export function nameOf(node: NodeSummary): string {
  const name = node.labels.find((l) => l.startsWith(`${NAME_LABEL}=`))?.slice(NAME_LABEL.length + 1);
  return name ? `${node.id} (${name})` : node.id;
}
