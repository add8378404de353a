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
//   refused before anything is touched (unless --force, which says what it
//     risks): a bundle whose Kubernetes breaks the version-skew policy
//     (kubernetes_skew.ts), a worker's Node that is not Ready, an apiserver
//     that does not answer
//   --dry-run: the plan, each node's versions now and after, and which pods
//     each drain would evict; nothing is changed
//   the first failure stops the rollout, naming the node and its reason;
//   running the command again resumes: nodes at the version are skipped,
//   and a node that already failed this version is not tried again
//   unless --force

import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import type { NodeSummary } from "./format.ts";
import { ownerKubernetesOnce, type OwnerKubernetes } from "./kubernetes_api.ts";
import { nodeReadiness } from "./health.ts";
import { kubernetesSkew } from "./kubernetes_skew.ts";
import { drainBeforeGoing, previewDrain, runsKubernetes, uncordonWhenBack } from "./node_power.ts";
import { listNodesPatiently, nameOf, type CallSettings } from "./nodes.ts";
import { updateNode, type Bundle, type UpdateOptions, type UpdateResult } from "./update.ts";

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

/** What must hold before a cluster update touches anything: each refusal, and what could not be checked. */
export interface Preflight {
  refusals: string[];
  unchecked: string[];
}

/** The update's preconditions (see the head of this file); `kubernetes` is the owner's access, asked only when Kubernetes runs. */
export async function preflight(nodes: readonly NodeSummary[], bundle: Bundle, kubernetes: () => Promise<OwnerKubernetes>): Promise<Preflight> {
  const up = nodes.filter((n) => n.state === "UP");
  const skew = kubernetesSkew(up, bundle.manifest.kubernetes);
  const refusals = skew.refusal ? [skew.refusal] : [];
  const workers = up.filter((n) => n.roles.includes("kubernetes-worker"));
  if (workers.length > 0 && runsKubernetes(nodes)) {
    try {
      const { ready } = await nodeReadiness(await kubernetes());
      const notReady = workers.filter((w) => ready.get(w.id) !== true).map((w) => `${nameOf(w)}'s Node ${ready.has(w.id) ? "is not Ready" : "does not exist"}`);
      if (notReady.length) refusals.push(`${notReady.join("; ")}: a drain would move pods onto fewer nodes than the cluster has`);
    } catch (err) {
      refusals.push(`the Kubernetes API did not answer (${(err as Error).message}): nothing could be drained`);
    }
  }
  return { refusals, unchecked: skew.unchecked };
}

/** `ctl cluster update --dry-run`: the plan, in order, with each node's versions and its drain. */
export interface ClusterUpdateDryRun {
  version: string;
  kubernetes?: string;
  order: { node: string; name: string; group: "controller" | "member" | "other"; from?: string; kubernetesFrom?: string; evict?: string[]; stay?: string[] }[];
  skipped: string[];
  preflight: Preflight;
}

export async function dryRunClusterUpdate(credentials: OwnerCredentials, settings: CallSettings, bundle: Bundle, options: Pick<ClusterUpdateOptions, "drain">): Promise<ClusterUpdateDryRun> {
  const nodes = await listNodesPatiently(credentials, settings);
  const plan = planClusterUpdate(nodes, bundle.manifest.version);
  const kubernetes = ownerKubernetesOnce(credentials, settings);
  const checks = await preflight(nodes, bundle, kubernetes);
  const kubernetesRuns = runsKubernetes(nodes);
  const order: ClusterUpdateDryRun["order"] = [];
  const groups = [
    ["controller", plan.controllers],
    ["member", plan.members],
    ["other", plan.workers],
  ] as const;
  for (const [group, members] of groups) {
    for (const node of members) {
      const step: ClusterUpdateDryRun["order"][number] = {
        node: node.id,
        name: nameOf(node),
        group,
        ...(node.version ? { from: node.version } : {}),
        ...(node.kubernetesVersion ? { kubernetesFrom: node.kubernetesVersion } : {}),
      };
      if (options.drain && kubernetesRuns && node.roles.includes("kubernetes-worker")) {
        // As updateCluster drains: bare pods stay (no --force there).
        const preview = await previewDrain(await kubernetes(), node.id, false);
        step.evict = preview.evict;
        step.stay = preview.stay;
      }
      order.push(step);
    }
  }
  return {
    version: bundle.manifest.version,
    ...(bundle.manifest.kubernetes ? { kubernetes: bundle.manifest.kubernetes } : {}),
    order,
    skipped: plan.skip.map(nameOf),
    preflight: checks,
  };
}

/** The dry run as people read it. */
export function describeDryRun(run: ClusterUpdateDryRun): string {
  const lines = [`to ${run.version}${run.kubernetes ? ` (Kubernetes ${run.kubernetes})` : ""}, in this order:`];
  const group = { controller: "Kubernetes controller", member: "consensus member", other: "other" };
  run.order.forEach((step, i) => {
    const drain =
      step.evict === undefined ? "not drained" : `drained: ${step.evict.length ? `evicts ${step.evict.join(", ")}` : "nothing to evict"}${step.stay?.length ? `; stay: ${step.stay.join(", ")}` : ""}`;
    lines.push(
      `  ${i + 1}. ${step.name} (${group[step.group]}): ${step.from ?? "unknown"} → ${run.version}${step.kubernetesFrom ? `, Kubernetes ${step.kubernetesFrom} → ${run.kubernetes ?? "unknown"}` : ""}; ${drain}`,
    );
  });
  if (run.order.length === 0) lines.push("  (nothing to update)");
  if (run.skipped.length) lines.push(`already at ${run.version}: ${run.skipped.join(", ")}`);
  for (const line of run.preflight.unchecked) lines.push(`not checked: ${line}`);
  for (const line of run.preflight.refusals) lines.push(`refused (unless --force): ${line}`);
  lines.push("nothing was changed (--dry-run)");
  return lines.join("\n");
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

/** What a cluster update asks of the cluster: its records, the owner's Kubernetes access (made once, when needed), and one node's update. */
export interface ClusterUpdateCalls {
  listNodes: () => Promise<NodeSummary[]>;
  kubernetes: () => Promise<OwnerKubernetes>;
  updateNode: (id: string, options: UpdateOptions) => Promise<UpdateResult>;
}

type UpdateSay = { note: (line: string) => void; progress: (line: string) => void };

/** The calls over the owner's connection to the cluster. */
export function clusterUpdateCalls(credentials: OwnerCredentials, settings: CallSettings, bundle: Bundle, say: UpdateSay): ClusterUpdateCalls {
  return {
    listNodes: () => listNodesPatiently(credentials, settings),
    kubernetes: ownerKubernetesOnce(credentials, settings),
    updateNode: (id, options) => updateNode(credentials, settings, id, bundle, options, { note: say.note, progress: say.progress }),
  };
}

export async function updateCluster(credentials: OwnerCredentials, settings: CallSettings, bundle: Bundle, options: ClusterUpdateOptions, say: UpdateSay): Promise<ClusterUpdateResult> {
  return rollOut(clusterUpdateCalls(credentials, settings, bundle, say), bundle, options, say);
}

/** The rollout itself (see the head of this file), through `calls`. */
export async function rollOut(calls: ClusterUpdateCalls, bundle: Bundle, options: ClusterUpdateOptions, say: UpdateSay): Promise<ClusterUpdateResult> {
  const started = Date.now();
  const version = bundle.manifest.version;
  const steps: ClusterUpdateStep[] = [];
  const nodes = await calls.listNodes();
  const plan = planClusterUpdate(nodes, version);
  for (const node of plan.skip) steps.push({ node: node.id, name: nameOf(node), outcome: "skipped" });
  const notUp = nodes.filter((n) => n.state !== "UP");
  if (notUp.length > 0) say.note(`not updated (not UP): ${notUp.map((n) => `${nameOf(n)} ${n.state}`).join(", ")}`);
  say.note(
    `updating to ${version}: ${plan.controllers.length} Kubernetes controllers, then ${plan.members.length} other consensus members (one at a time), then ${plan.workers.length} others (${options.maxUnavailable} at a time); ${plan.skip.length} at ${version} already`,
  );
  const kubernetes = calls.kubernetes;
  const checks = await preflight(nodes, bundle, kubernetes);
  for (const line of checks.unchecked) say.note(`not checked: ${line}`);
  if (checks.refusals.length > 0) {
    if (!options.force) throw new OperatorError(`refused before anything was touched: ${checks.refusals.join("; ")} (--force updates anyway)`);
    say.note(`--force: ${checks.refusals.join("; ")}; updating anyway, at the risk of components Kubernetes does not support together, or pods with nowhere to go, until every node is at ${version}`);
  }

  const one = async (node: NodeSummary): Promise<void> => {
    // Looked at again right before: the cluster changes while the rollout runs.
    const now = await calls.listNodes();
    const fresh = now.find((n) => n.id === node.id);
    if (!fresh) throw new OperatorError(`${nameOf(node)} left the cluster during the update`);
    if (fresh.version === version) {
      steps.push({ node: node.id, name: nameOf(node), outcome: "skipped" });
      return;
    }
    const why = refusal(fresh, now, version, options.force);
    if (why) throw new OperatorError(`stopped before ${nameOf(fresh)}: ${why}`);
    say.note(`${nameOf(fresh)}: ${fresh.version ?? "unknown"} → ${version}`);
    const drained = await drainBeforeGoing(kubernetes, fresh, "update", { drain: options.drain, drainTimeoutMs: options.drainTimeoutMs, force: false, kubernetesRuns: runsKubernetes(now) }, say).catch(
      (err: unknown) => {
        throw new OperatorError(`stopped at ${nameOf(fresh)}: ${(err as Error).message}`);
      },
    );
    const result = await calls
      .updateNode(fresh.id, { activate: true, wait: true, force: options.force, allowDowngrade: options.allowDowngrade, ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}) })
      .catch((err: unknown) => {
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
