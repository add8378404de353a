// `ctl cluster update --image DIR --max-unavailable N`: every node to the
// bundle's version, one node (or N workers) at a time, never more at risk
// than the cluster can lose.
//
//   the plan: nodes not yet at the version; workers (no consensus role)
//     first, then consensus members
//   workers:   up to N at once: update, reboot, wait until HEALTHY at the version
//   members:   one at a time, and only while every other member is HEALTHY
//              (etcd keeps its quorum while one voter is away)
//   the first failure stops the rollout, naming the node and its reason;
//   running the command again resumes: nodes at the version are skipped,
//   and a node that already failed this version is not tried again
//   unless --force

import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import type { NodeSummary } from "./format.ts";
import { listNodesPatiently, nameOf, type CallSettings } from "./nodes.ts";
import { updateNode, type Bundle } from "./update.ts";

export interface ClusterUpdateOptions {
  maxUnavailable: number;
  /** Update nodes that are not HEALTHY, and nodes that failed this version before. */
  force: boolean;
  allowDowngrade: boolean;
  /** How long each node gets to come back. */
  waitMs?: number;
}

export interface ClusterUpdateStep {
  node: string;
  name: string;
  /** "updated", or "skipped" (already at the version). */
  outcome: "updated" | "skipped";
  seconds?: number;
}

export interface ClusterUpdateResult {
  version: string;
  steps: ClusterUpdateStep[];
  seconds: number;
}

/** Who goes when: workers first, then consensus members; each group in ID order (a rerun takes the same order). */
export function planClusterUpdate(nodes: readonly NodeSummary[], version: string): { skip: NodeSummary[]; workers: NodeSummary[]; members: NodeSummary[] } {
  const byId = [...nodes].filter((n) => n.state === "UP").sort((a, b) => a.id.localeCompare(b.id));
  const skip = byId.filter((n) => n.version === version);
  const todo = byId.filter((n) => n.version !== version);
  return { skip, workers: todo.filter((n) => !n.roles.includes("consensus")), members: todo.filter((n) => n.roles.includes("consensus")) };
}

/** Why node `node` must not be updated now, if it must not. */
export function refusal(node: NodeSummary, nodes: readonly NodeSummary[], version: string, force: boolean): string | undefined {
  if (force) return undefined;
  if (node.updateFailure?.version === version) return `${nameOf(node)} failed ${version} before (${node.updateFailure.reason}); pass --force to try it again`;
  if (node.health !== "HEALTHY") return `${nameOf(node)} is ${node.health}${node.healthReason ? ` (${node.healthReason})` : ""}`;
  if (node.roles.includes("consensus")) {
    const sick = nodes.filter((n) => n.id !== node.id && n.roles.includes("consensus") && n.health !== "HEALTHY");
    if (sick.length > 0) return `another consensus member is not HEALTHY (${sick.map((n) => `${nameOf(n)} ${n.health}`).join(", ")}): updating ${nameOf(node)} now could cost the cluster its quorum`;
  }
  return undefined;
}

export async function updateCluster(
  credentials: OwnerCredentials,
  settings: CallSettings,
  bundle: Bundle,
  options: ClusterUpdateOptions,
  say: { note: (line: string) => void; progress: (line: string) => void },
): Promise<ClusterUpdateResult> {
  const started = Date.now();
  const version = bundle.manifest.version;
  const steps: ClusterUpdateStep[] = [];
  const nodes = await listNodesPatiently(credentials, settings);
  const plan = planClusterUpdate(nodes, version);
  for (const node of plan.skip) steps.push({ node: node.id, name: nameOf(node), outcome: "skipped" });
  const notUp = nodes.filter((n) => n.state !== "UP");
  if (notUp.length > 0) say.note(`not updated (not UP): ${notUp.map((n) => `${nameOf(n)} ${n.state}`).join(", ")}`);
  say.note(
    `updating to ${version}: ${plan.workers.length} workers (${options.maxUnavailable} at a time), then ${plan.members.length} consensus members (one at a time); ${plan.skip.length} at ${version} already`,
  );

  const one = async (node: NodeSummary): Promise<void> => {
    // Looked at again right before: the cluster changes while the rollout runs.
    const now = await listNodesPatiently(credentials, settings);
    const fresh = now.find((n) => n.id === node.id);
    if (!fresh) throw new OperatorError(`${nameOf(node)} left the cluster during the update`);
    if (fresh.version === version) {
      steps.push({ node: node.id, name: nameOf(node), outcome: "skipped" });
      return;
    }
    const why = refusal(fresh, now, version, options.force);
    if (why) throw new OperatorError(`stopped before ${nameOf(fresh)}: ${why}`);
    say.note(`${nameOf(fresh)}: ${fresh.version ?? "unknown"} → ${version}`);
    const result = await updateNode(
      credentials,
      settings,
      fresh.id,
      bundle,
      { activate: true, wait: true, force: options.force, allowDowngrade: options.allowDowngrade, ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}) },
      { note: say.note, progress: say.progress },
    ).catch((err: unknown) => {
      throw new OperatorError(`stopped at ${nameOf(fresh)}: ${(err as Error).message}`);
    });
    say.note(`${nameOf(fresh)} is HEALTHY at ${version} (${result.seconds} s)`);
    steps.push({ node: fresh.id, name: nameOf(fresh), outcome: "updated", ...(result.seconds !== undefined ? { seconds: result.seconds } : {}) });
  };

  for (let i = 0; i < plan.workers.length; i += options.maxUnavailable) {
    const batch = plan.workers.slice(i, i + options.maxUnavailable);
    const outcomes = await Promise.allSettled(batch.map(one));
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === "rejected");
    if (failed) throw failed.reason;
  }
  for (const member of plan.members) await one(member);
  return { version, steps, seconds: Math.round((Date.now() - started) / 100) / 10 };
}
