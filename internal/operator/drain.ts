// Draining a worker before it goes away (issue 50), as `kubectl drain` does
// and Talos does around its reboots: the owner's ctl, through the Kubernetes
// API with the owner's identity (kubernetes_api.ts).
//
//   cordon      the Node unschedulable: no new pod lands on it
//   plan        its pods: a DaemonSet's stay (it runs one on every node, and
//               would put it back at once), a static pod stays (its kubelet
//               owns it), a finished one holds nothing; a pod no controller
//               would make again (a bare pod) is refused unless forced, and
//               then nothing is changed (the cordon is taken back); every
//               other is evicted
//   evict       through the Eviction API, so that PodDisruptionBudgets are
//               kept: a pod whose budget allows no disruption now is asked
//               again every EVICTION_RETRY_MS (its controller may be starting
//               a replacement elsewhere) until the drain's deadline, which
//               then names it and the budget's refusal
//   wait        until every evicted pod is gone (deleted, or replaced by one
//               of another UID under the same name)
//   uncordon    `ctl node uncordon`: schedulable again
//
// Around a reboot or a power-off (node_power.ts) a bare pod stays instead of
// being refused: its kubelet runs it again when the node is back, which an
// eviction would prevent for good. The cordon a command will take back
// itself is marked on the Node (CORDONED_BY_ANNOTATION), so that the same
// command run again after an interruption knows the cordon is its own, not
// an operator's, and uncordons the node when it is done.
//
// A Node that does not exist (a node without the kubernetes-worker role)
// has nothing to drain. Nothing here deletes a pod itself: what leaves goes
// through its budget and its own grace period.

import { cordonMark, CORDONED_BY_ANNOTATION } from "../kubernetes/mod.ts";
import { OperatorError } from "./config_dir.ts";
import { statusMessage, type OwnerKubernetes } from "./kubernetes_api.ts";

/** On a Node a ctl command cordoned and will uncordon itself: the command, and when (internal/kubernetes/node_cordon.ts). */
export { CORDONED_BY_ANNOTATION };

/** How often a pod whose disruption budget refused its eviction is asked for again. */
export const EVICTION_RETRY_MS = 5_000;
/** How often the evicted pods are looked at until they are gone. */
const GONE_POLL_MS = 2_000;
/** The default deadline of a drain (`--drain-timeout`): evictions and the pods' graceful ends together. */
export const DEFAULT_DRAIN_TIMEOUT_S = 300;

/** The parts of a Pod a drain reads. */
export interface DrainPod {
  metadata?: {
    name?: string;
    namespace?: string;
    uid?: string;
    deletionTimestamp?: string;
    annotations?: Record<string, string>;
    ownerReferences?: { kind?: string; name?: string; controller?: boolean }[];
  };
  status?: { phase?: string };
}

export interface PodRef {
  namespace: string;
  name: string;
  uid: string;
}

export const podName = (pod: PodRef) => `${pod.namespace}/${pod.name}`;

export interface DrainPlan {
  /** Evicted, in the order listed. */
  evict: PodRef[];
  /** Left on the node, each with why. */
  stay: { pod: PodRef; why: string }[];
  /** Bare pods, which a drain without force refuses to evict: nothing would make them again. */
  refuse: PodRef[];
}

/** What a drain does with a bare pod (no controller): refuse to drain (kubectl drain's way), or leave it on the node for its kubelet to run again after a reboot. `force` evicts it either way. */
export type BarePods = "refuse" | "stay";

/** The pods bound to Node `node`. */
export async function podsOn(api: OwnerKubernetes, node: string): Promise<DrainPod[]> {
  const listed = await api.request("GET", `/api/v1/pods?fieldSelector=${encodeURIComponent(`spec.nodeName=${node}`)}`);
  if (listed.status !== 200) throw new OperatorError(`could not list the pods on ${node}: ${statusMessage(listed)}`);
  return (listed.body as { items?: DrainPod[] }).items ?? [];
}

/** Which of a node's pods a drain evicts, which stay and why, and which it refuses to evict unless `force`. Pure. */
export function drainPlan(pods: readonly DrainPod[], force = false, bare: BarePods = "refuse"): DrainPlan {
  const plan: DrainPlan = { evict: [], stay: [], refuse: [] };
  for (const pod of pods) {
    const m = pod.metadata ?? {};
    if (!m.name || !m.namespace) continue;
    const ref = { namespace: m.namespace, name: m.name, uid: m.uid ?? "" };
    const owner = m.ownerReferences?.find((o) => o.controller) ?? m.ownerReferences?.[0];
    if (owner?.kind === "DaemonSet") plan.stay.push({ pod: ref, why: `DaemonSet ${owner.name ?? "?"}'s pod (it runs on every node)` });
    else if (m.annotations?.["kubernetes.io/config.mirror"] !== undefined) plan.stay.push({ pod: ref, why: "a static pod (its kubelet keeps it)" });
    else if (pod.status?.phase === "Succeeded" || pod.status?.phase === "Failed") plan.stay.push({ pod: ref, why: `finished (${pod.status.phase})` });
    else if (!owner && !force && bare === "stay") plan.stay.push({ pod: ref, why: "a bare pod (no controller would make it again elsewhere): its kubelet runs it again when the node is back" });
    else if (!owner && !force) plan.refuse.push(ref);
    else plan.evict.push(ref);
  }
  return plan;
}

const nodePath = (node: string) => `/api/v1/nodes/${encodeURIComponent(node)}`;
const podPath = (pod: PodRef) => `/api/v1/namespaces/${encodeURIComponent(pod.namespace)}/pods/${encodeURIComponent(pod.name)}`;

/**
 * Makes Node `node` unschedulable (true) or schedulable (false). Returns
 * false when there is no such Node (nothing to do), true otherwise. `by`
 * marks a cordon as a command's own (CORDONED_BY_ANNOTATION); an uncordon
 * always removes the mark.
 */
export async function setUnschedulable(api: OwnerKubernetes, node: string, unschedulable: boolean, by?: string): Promise<boolean> {
  const mark = unschedulable ? (by === undefined ? undefined : cordonMark(by)) : null;
  const patch = { spec: { unschedulable: unschedulable ? true : null }, ...(mark !== undefined ? { metadata: { annotations: { [CORDONED_BY_ANNOTATION]: mark } } } : {}) };
  const answer = await api.request("PATCH", nodePath(node), patch, "application/merge-patch+json");
  if (answer.status === 404) return false;
  if (answer.status !== 200) throw new OperatorError(`could not ${unschedulable ? "cordon" : "uncordon"} Node ${node}: ${statusMessage(answer)}`);
  return true;
}

export interface DrainOptions {
  /** The whole drain's deadline. */
  timeoutMs: number;
  /** Evict bare pods too (gone for good). */
  force?: boolean;
  /** Bare pods without force: refused (the default), or left on the node. */
  bare?: BarePods;
  /** The command that will uncordon the node itself when it is done (marked on the Node); without it the cordon is the operator's to take back. */
  by?: string;
  say: { note: (line: string) => void; progress?: (line: string) => void };
  signal?: AbortSignal;
}

export interface DrainResult {
  /** Whether the node has a Node (a kubelet has registered it); without one nothing was done. */
  hasNode: boolean;
  /** The Node was cordoned before this drain by someone else (an operator's cordon, not a command's mark): it stays cordoned. */
  cordonedBefore: boolean;
  evicted: string[];
  stayed: { pod: string; why: string }[];
  seconds: number;
}

/**
 * Cordons Node `node` and evicts its pods (drainPlan), then waits until they
 * are gone. Throws an OperatorError naming the pods left and why when the
 * deadline comes first; the Node stays cordoned then, and the caller says so.
 */
export async function drainNode(api: OwnerKubernetes, node: string, options: DrainOptions): Promise<DrainResult> {
  const started = Date.now();
  const deadline = started + options.timeoutMs;
  const seconds = () => Math.round((Date.now() - started) / 100) / 10;
  const before = await api.request("GET", nodePath(node));
  const none = () => ({ hasNode: false, cordonedBefore: false, evicted: [], stayed: [], seconds: seconds() });
  if (before.status === 404) return none();
  if (before.status !== 200) throw new OperatorError(`could not read Node ${node}: ${statusMessage(before)}`);
  const read = before.body as { spec?: { unschedulable?: boolean }; metadata?: { annotations?: Record<string, string> } };
  // A cordon marked by a command is that command's, left by an interrupted run: not the operator's to keep.
  const wasCordoned = read.spec?.unschedulable === true && read.metadata?.annotations?.[CORDONED_BY_ANNOTATION] === undefined;
  // Cordoned before the pods are listed, so that none lands there after.
  if (!(await setUnschedulable(api, node, true, wasCordoned ? undefined : options.by))) return none();
  const plan = drainPlan(await podsOn(api, node), options.force, options.bare);
  if (plan.refuse.length > 0) {
    if (!wasCordoned) await setUnschedulable(api, node, false);
    throw new OperatorError(
      `not draining ${node}: no controller would make ${plan.refuse.map(podName).join(", ")} again (bare pod${plan.refuse.length === 1 ? "" : "s"}); delete ${plan.refuse.length === 1 ? "it" : "them"}, or pass --force to evict ${plan.refuse.length === 1 ? "it" : "them"} for good; nothing was changed`,
    );
  }
  options.say.note(`${node} cordoned: no new pod is scheduled there`);
  const stayed = plan.stay.map((s) => ({ pod: podName(s.pod), why: s.why }));
  for (const s of stayed) options.say.progress?.(`${s.pod} stays: ${s.why}`);
  if (plan.evict.length > 0) options.say.note(`evicting ${plan.evict.length} pod${plan.evict.length === 1 ? "" : "s"} from ${node}`);

  // Evictions: each pod until it is let go or gone; a budget's refusal is asked again.
  const refused = new Map<string, string>();
  let waiting = [...plan.evict];
  while (waiting.length > 0) {
    options.signal?.throwIfAborted();
    const next: PodRef[] = [];
    for (const pod of waiting) {
      const answer = await api.request("POST", `${podPath(pod)}/eviction`, { apiVersion: "policy/v1", kind: "Eviction", metadata: { name: pod.name, namespace: pod.namespace } });
      if (answer.status === 200 || answer.status === 201 || answer.status === 404) {
        refused.delete(podName(pod));
        continue;
      }
      if (answer.status !== 429) throw new OperatorError(`could not evict ${podName(pod)} from ${node}: ${statusMessage(answer)}`);
      const why = statusMessage(answer);
      if (refused.get(podName(pod)) !== why) options.say.progress?.(`${podName(pod)} waits: ${why}`);
      refused.set(podName(pod), why);
      next.push(pod);
    }
    waiting = next;
    if (waiting.length === 0) break;
    if (Date.now() + EVICTION_RETRY_MS > deadline) {
      throw new DrainStopped(node, `drain of ${node} stopped after ${seconds()} s: ${waiting.map((p) => `${podName(p)} could not be evicted (${refused.get(podName(p))})`).join("; ")}`, wasCordoned);
    }
    await Bun.sleep(EVICTION_RETRY_MS);
  }

  // Evicted pods end in their own grace period; wait until each is gone.
  let left = [...plan.evict];
  while (left.length > 0) {
    options.signal?.throwIfAborted();
    const still: PodRef[] = [];
    for (const pod of left) {
      const answer = await api.request("GET", podPath(pod));
      if (answer.status === 404) continue;
      if (answer.status !== 200) throw new OperatorError(`could not read ${podName(pod)}: ${statusMessage(answer)}`);
      const uid = (answer.body as DrainPod).metadata?.uid;
      if (uid !== undefined && pod.uid !== "" && uid !== pod.uid) continue; // A new pod under the same name (a StatefulSet's).
      still.push(pod);
    }
    left = still;
    if (left.length === 0) break;
    if (Date.now() + GONE_POLL_MS > deadline) {
      throw new DrainStopped(node, `drain of ${node} stopped after ${seconds()} s: evicted but not gone yet: ${left.map(podName).join(", ")}`, wasCordoned);
    }
    await Bun.sleep(GONE_POLL_MS);
  }
  return { hasNode: true, cordonedBefore: wasCordoned, evicted: plan.evict.map(podName), stayed, seconds: seconds() };
}

/** A drain that met its deadline: `reason` names the pods and why; the message adds that the Node stays cordoned (ctl node drain leaves it so). */
export class DrainStopped extends OperatorError {
  constructor(
    readonly node: string,
    readonly reason: string,
    /** The Node was cordoned by someone else before the drain. */
    readonly cordonedBefore: boolean,
  ) {
    super(`${reason}; ${node} stays cordoned`);
  }
}
