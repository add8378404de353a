// `ctl cluster update --image DIR --max-unavailable N`: every node to the
// bundle's version, one node (or N workers) at a time, never more at risk
// than the cluster can lose.
//
//   the plan: nodes not yet at the version, in the order Kubernetes's
//     version-skew policy asks for (no kubelet newer than an apiserver it
//     talks to; k0s's Autopilot and Talos's upgrade-k8s go the same way):
//   controllers: the Kubernetes controllers first, one at a time, each
//              HEALTHY at the version (its apiserver, controller-manager and
//              scheduler running again) before the next
//   members:   then the other consensus members, one at a time, and only
//              while every other member is HEALTHY (etcd keeps its quorum
//              while one voter is away; a controller is a member too)
//   workers:   then the rest, up to N at once (drained nodes count)
//   each node with a kubelet is drained first (node_power.ts: its pods
//     evicted through the Eviction API, PodDisruptionBudgets kept, bare
//     pods left) and uncordoned once its Node is Ready at the new version;
//     --no-drain skips that and says what it risks
//   the first failure stops the rollout, naming the node and its reason;
//   running the command again resumes: nodes at the version are skipped,
//   and a node that already failed this version is not tried again
//   unless --force

import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import type { NodeSummary } from "./format.ts";
import { ownerKubernetes, type OwnerKubernetes } from "./kubernetes_api.ts";
import { drainBeforeGoing, uncordonWhenBack } from "./node_power.ts";
import { listNodesPatiently, nameOf, type CallSettings } from "./nodes.ts";
import { updateNode, type Bundle } from "./update.ts";

export interface ClusterUpdateOptions {
  maxUnavailable: number;
  /** Update nodes that are not HEALTHY, and nodes that failed this version before. */
  force: boolean;
  allowDowngrade: boolean;
  /** How long each node gets to come back. */
  waitMs?: number;
  /** Drain each node with a kubelet before it reboots (false: --no-drain). */
  drain: boolean;
  drainTimeoutMs: number;
}

export interface ClusterUpdateStep {
  node: string;
  name: string;
  /** "updated", or "skipped" (already at the version). */
  outcome: "updated" | "skipped";
  seconds?: number;
  /** The pods its drain evicted, when it was drained. */
  evicted?: string[];
}

export interface ClusterUpdateResult {
  version: string;
  steps: ClusterUpdateStep[];
  seconds: number;
}

export interface ClusterUpdatePlan {
  skip: NodeSummary[];
  /** Kubernetes controllers, one at a time, first. */
  controllers: NodeSummary[];
  /** The other consensus members, one at a time. */
  members: NodeSummary[];
  /** The rest, --max-unavailable at a time, last. */
  workers: NodeSummary[];
}

/** Who goes when: Kubernetes controllers, then the other consensus members, then the rest; each group in ID order (a rerun takes the same order). */
export function planClusterUpdate(nodes: readonly NodeSummary[], version: string): ClusterUpdatePlan {
  const byId = [...nodes].filter((n) => n.state === "UP").sort((a, b) => a.id.localeCompare(b.id));
  const skip = byId.filter((n) => n.version === version);
  const todo = byId.filter((n) => n.version !== version);
  const controller = (n: NodeSummary) => n.roles.includes("kubernetes-controller");
  const member = (n: NodeSummary) => n.roles.includes("consensus");
  return { skip, controllers: todo.filter(controller), members: todo.filter((n) => !controller(n) && member(n)), workers: todo.filter((n) => !controller(n) && !member(n)) };
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
    `updating to ${version}: ${plan.controllers.length} Kubernetes controllers, then ${plan.members.length} other consensus members (one at a time), then ${plan.workers.length} others (${options.maxUnavailable} at a time); ${plan.skip.length} at ${version} already`,
  );
  // The owner's Kubernetes access, made once and only if a node needs draining.
  let api: Promise<OwnerKubernetes> | undefined;
  const kubernetes = () => (api ??= ownerKubernetes(credentials, settings));

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
    const kubernetesRuns = now.some((n) => n.roles.includes("kubernetes-controller"));
    const drained = await drainBeforeGoing(kubernetes, fresh, "update", { drain: options.drain, drainTimeoutMs: options.drainTimeoutMs, force: false, kubernetesRuns }, say).catch((err: unknown) => {
      throw new OperatorError(`stopped at ${nameOf(fresh)}: ${(err as Error).message}`);
    });
    const result = await updateNode(
      credentials,
      settings,
      fresh.id,
      bundle,
      { activate: true, wait: true, force: options.force, allowDowngrade: options.allowDowngrade, ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}) },
      { note: say.note, progress: say.progress },
    ).catch((err: unknown) => {
      throw new OperatorError(`stopped at ${nameOf(fresh)}: ${(err as Error).message}${drained?.mustUncordon ? ` (it stays cordoned: once it is back, ctl node uncordon ${fresh.id})` : ""}`);
    });
    if (drained) await uncordonWhenBack(drained, fresh.id, result.bootMs ?? Date.now(), say);
    say.note(`${nameOf(fresh)} is HEALTHY at ${version} (${result.seconds} s)${drained?.mustUncordon ? ", its Node Ready and uncordoned" : ""}`);
    steps.push({
      node: fresh.id,
      name: nameOf(fresh),
      outcome: "updated",
      ...(result.seconds !== undefined ? { seconds: result.seconds } : {}),
      ...(drained ? { evicted: drained.result.evicted } : {}),
    });
  };

  for (const controller of plan.controllers) await one(controller);
  for (const member of plan.members) await one(member);
  for (let i = 0; i < plan.workers.length; i += options.maxUnavailable) {
    const batch = plan.workers.slice(i, i + options.maxUnavailable);
    const outcomes = await Promise.allSettled(batch.map(one));
    const failed = outcomes.find((o): o is PromiseRejectedResult => o.status === "rejected");
    if (failed) throw failed.reason;
  }
  return { version, steps, seconds: Math.round((Date.now() - started) / 100) / 10 };
}
