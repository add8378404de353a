// A node's reboot and power-off as the owner asks for them (`ctl node
// reboot`, `ctl node poweroff`), wrapped in a drain when the node runs a
// kubelet (issue 50), as Talos wraps its reboots and k0sctl its upgrades.
// The drain and the uncordon are also what `ctl cluster update` puts
// around each node's update, and `ctl node reset` before it resets one
// (drainBeforeGoing, uncordonWhenBack):
//
//   drain       cordon its Node and evict its pods through the Eviction API
//               (drain.ts), so that PodDisruptionBudgets are kept and a
//               Deployment's replicas move before the node goes. Bare pods
//               stay (their kubelet runs them again when the node is back;
//               --force evicts them for good). A drain that cannot finish
//               in time (a budget that allows no disruption) stops the
//               command before the node is touched: the pod and the
//               budget's refusal are named, and the Node is uncordoned.
//   go          the node stops its services cleanly and reboots (or powers off)
//   wait        a reboot that drained waits, as --wait does: the node back
//               from a new boot and HEALTHY, then its Node Ready with a
//               kubelet heartbeat from that boot
//   uncordon    the cordon the drain made is taken back; an operator's own
//               cordon (one without the command's mark) stays
//
// A cluster where no node holds the kubernetes-controller role runs no
// Kubernetes, and a worker there has nothing to drain. One whose controller
// does not answer is another matter: the command stops before the node is
// touched, and --no-drain is the owner's choice to make.
//
// A power-off leaves its node cordoned (it is off); the controller's
// reconciler takes that back once the node is on again and its Node Ready
// (internal/kubernetes/node_cordon.ts), or `ctl node uncordon` does. --no-drain skips the drain and
// says what that risks. A node without the kubernetes-worker role has no
// pods to drain, and no Kubernetes is asked.

import type { OwnerCredentials } from "./config_dir.ts";
import { OperatorError } from "./config_dir.ts";
import { withNode } from "./node_management.ts";
import { drainNode, drainPlan, DrainStopped, podName, podsOn, setUnschedulable, type DrainResult } from "./drain.ts";
import type { NodeSummary } from "./format.ts";
import { ownerKubernetes, statusMessage, type OwnerKubernetes } from "./kubernetes_api.ts";
import { REBOOT_WAIT_MS, waitUntilRebooted, type CallSettings } from "./nodes.ts";

/** How often a rebooted node's Node is read until it is Ready again. */
const NODE_READY_POLL_MS = 2_000;

export type PowerAction = "reboot" | "poweroff";

export interface PowerOptions {
  /** Drain first when the node runs a kubelet (false: --no-drain). */
  drain: boolean;
  drainTimeoutMs: number;
  /** Evict bare pods too (gone for good). */
  force: boolean;
  /** A reboot: wait until the node is back even when nothing was drained. */
  wait: boolean;
  /** Some node of the cluster holds the kubernetes-controller role: without one no Kubernetes runs, and nothing is drained. */
  kubernetesRuns: boolean;
}

export interface Say {
  note: (line: string) => void;
  progress?: (line: string) => void;
}

/** The parts of ctl's node calls a power action needs: an interface, so that a test can stand in for a node. */
export interface PowerCalls {
  kubernetes(): Promise<OwnerKubernetes>;
  /** Asks the node to reboot or power off; resolves once it has agreed. */
  power(id: string, action: PowerAction): Promise<void>;
  /** Resolves once node `id` reports a boot after `before` and is HEALTHY. */
  waitRebooted(id: string, before: number | undefined): Promise<NodeSummary>;
}

export interface PowerResult {
  node: string;
  action: PowerAction;
  drained?: { evicted: string[]; stayed: { pod: string; why: string }[]; seconds: number };
  /** A reboot waited for: the node's health when it was back, and the seconds from the ask. */
  health?: string;
  seconds?: number;
  /** Whether the drain's cordon was taken back (a reboot that waited for the Node Ready). */
  uncordoned?: boolean;
}

/** The real calls, over the owner's credentials. */
export function powerCalls(credentials: OwnerCredentials, settings: CallSettings): PowerCalls {
  return {
    kubernetes: () => ownerKubernetes(credentials, settings),
    power: (id, action) => withNode(credentials, id, async (client) => void (await (action === "reboot" ? client.reboot({}, settings) : client.powerOff({}, settings))), settings),
    waitRebooted: (id, before) => waitUntilRebooted(credentials, id, before, settings),
  };
}

/** Whether Kubernetes runs in a cluster of `nodes`: some node holds the kubernetes-controller role (PowerOptions.kubernetesRuns). */
export function runsKubernetes(nodes: readonly NodeSummary[]): boolean {
  return nodes.some((n) => n.roles.includes("kubernetes-controller"));
}

/** What the node goes through after its drain, in the drain's messages. */
export type Going = PowerAction | "update" | "reset";
const PAST: Record<Going, string> = { reboot: "rebooted", poweroff: "powered off", update: "updated", reset: "reset" };
const NO_DRAIN: Record<Going, string> = { reboot: "reboots it", poweroff: "powers it off", update: "updates it", reset: "resets it" };
const COMMAND: Record<Going, string> = { reboot: "ctl node reboot", poweroff: "ctl node poweroff", update: "ctl cluster update", reset: "ctl node reset" };

/** A node that goes and comes back keeps its bare pods: their kubelet runs them again. */
const BARE_PODS_WHEN_GOING = "stay";

/** What drainBeforeGoing would evict from `id` and leave there, without changing anything (ctl cluster update --dry-run). */
export async function previewDrain(api: OwnerKubernetes, id: string, force: boolean): Promise<{ evict: string[]; stay: string[] }> {
  const plan = drainPlan(await podsOn(api, id), force, BARE_PODS_WHEN_GOING);
  return { evict: plan.evict.map(podName), stay: plan.stay.map((s) => podName(s.pod)) };
}

/** A node drained before it goes: what to undo once it is back. */
export interface Drained {
  api: OwnerKubernetes;
  result: DrainResult;
  /** The drain made the cordon (not an operator before it): it is taken back once the Node is Ready again. */
  mustUncordon: boolean;
}

/**
 * Drains `node` before it goes (see the head of this file), if it runs a
 * kubelet and `drain` is on; undefined when there was nothing to drain. A
 * drain that cannot finish uncordons the Node and throws, naming the pod.
 */
export async function drainBeforeGoing(
  kubernetes: () => Promise<OwnerKubernetes>,
  node: NodeSummary,
  going: Going,
  options: Pick<PowerOptions, "drain" | "drainTimeoutMs" | "force" | "kubernetesRuns">,
  say: Say,
): Promise<Drained | undefined> {
  const id = node.id;
  if (!node.roles.includes("kubernetes-worker")) return undefined;
  if (!options.kubernetesRuns) {
    say.progress?.(`${id} has the kubernetes-worker role, but no node holds the kubernetes-controller role: no Kubernetes runs, nothing to drain`);
    return undefined;
  }
  if (!options.drain) {
    say.note(`--no-drain: ${id}'s pods stop with it, without their PodDisruptionBudgets being asked, and nothing moves them elsewhere first`);
    return undefined;
  }
  let api: OwnerKubernetes;
  try {
    api = await kubernetes();
  } catch (err) {
    throw new OperatorError(`cannot drain ${id} before it is ${PAST[going]}: ${(err as Error).message}; nothing was changed (--no-drain ${NO_DRAIN[going]} without draining)`);
  }
  let result: DrainResult;
  try {
    result = await drainNode(api, id, { timeoutMs: options.drainTimeoutMs, force: options.force, bare: BARE_PODS_WHEN_GOING, by: COMMAND[going], say });
  } catch (err) {
    if (!(err instanceof DrainStopped)) throw err;
    // Stopped at this node: it is not touched, and the cordon is taken back unless it was the operator's.
    const undone = err.cordonedBefore
      ? "it stays cordoned, as it was"
      : await setUnschedulable(api, id, false).then(
          () => "it was uncordoned",
          (e) => `uncordoning it failed too (${(e as Error).message}): ctl node uncordon ${id}`,
        );
    throw new OperatorError(`${err.reason}; ${id} was not ${PAST[going]} and ${undone} (a longer --drain-timeout waits longer for the budget)`);
  }
  if (!result.hasNode) return undefined;
  say.note(`${id} drained in ${result.seconds} s: ${result.evicted.length} pod${result.evicted.length === 1 ? "" : "s"} evicted${result.stayed.length ? `, ${result.stayed.length} stayed` : ""}`);
  return { api, result, mustUncordon: !result.cordonedBefore };
}

/** Once a drained node is back from boot `bootMs`: its Node Ready again with a heartbeat from that boot, then uncordoned (if the drain cordoned it). Returns whether it uncordoned. */
export async function uncordonWhenBack(drained: Drained, id: string, bootMs: number, say: Say): Promise<boolean> {
  if (!drained.mustUncordon) return false;
  await waitNodeReady(drained.api, id, bootMs, say);
  await setUnschedulable(drained.api, id, false);
  say.progress?.(`${id}'s Node is Ready and uncordoned`);
  return true;
}

/** Reboots or powers off `node`, drained first when it runs a kubelet (see the head of this file). */
export async function powerNode(calls: PowerCalls, node: NodeSummary, action: PowerAction, options: PowerOptions, say: Say): Promise<PowerResult> {
  const id = node.id;
  const result: PowerResult = { node: id, action };
  const asked = Date.now();
  const drained = await drainBeforeGoing(calls.kubernetes, node, action, options, say);
  if (drained) result.drained = { evicted: drained.result.evicted, stayed: drained.result.stayed, seconds: drained.result.seconds };

  await calls.power(id, action);
  const mustUncordon = drained?.mustUncordon === true;
  if (action === "poweroff") {
    if (mustUncordon) say.note(`${id} stays cordoned while it is off; the cluster uncordons it once it is on again and its Node Ready (or: ctl node uncordon ${id})`);
    return result;
  }
  if (!options.wait && !mustUncordon) return result;
  if (mustUncordon) say.progress?.(`waiting for ${id} to come back, to uncordon it (interrupted, it stays cordoned: ctl node reboot runs again, or ctl node uncordon ${id})`);
  const back = await calls.waitRebooted(id, node.bootMs);
  result.health = back.health;
  if (drained && mustUncordon) result.uncordoned = await uncordonWhenBack(drained, id, back.bootMs ?? asked, say);
  result.seconds = Math.round((Date.now() - asked) / 100) / 10;
  return result;
}

interface NodeObject {
  status?: { conditions?: { type?: string; status?: string; lastHeartbeatTime?: string; message?: string }[] };
}

/**
 * Waits until Node `id` is Ready with a heartbeat from its kubelet at or after
 * `sinceMs` (the node's new boot): a Ready condition written before the
 * reboot says nothing about the kubelet that runs now.
 */
export async function waitNodeReady(api: OwnerKubernetes, id: string, sinceMs: number, say: Say, waitMs = REBOOT_WAIT_MS): Promise<void> {
  const started = Date.now();
  let last = "not read yet";
  for (;;) {
    let answer;
    try {
      answer = await api.request("GET", `/api/v1/nodes/${encodeURIComponent(id)}`);
    } catch (err) {
      last = (err as Error).message;
    }
    if (answer?.status === 404) last = "no Node yet";
    else if (answer && answer.status !== 200) last = statusMessage(answer);
    else if (answer) {
      const ready = (answer.body as NodeObject).status?.conditions?.find((c) => c.type === "Ready");
      const heartbeat = Date.parse(ready?.lastHeartbeatTime ?? "");
      if (ready?.status === "True" && heartbeat >= sinceMs - 1_000) return;
      last = ready?.status === "True" ? "Ready, but not yet heard from since its new boot" : `not Ready (${ready?.message ?? "no condition"})`;
    }
    if (Date.now() - started >= waitMs)
      throw new OperatorError(`${id} is back, but its Node was not Ready within ${Math.round(waitMs / 1000)} s (${last}); it stays cordoned: ctl node uncordon ${id}`);
    say.progress?.(`waiting for ${id}'s Node to be Ready (${Math.round((Date.now() - started) / 1000)} s): ${last}`);
    await Bun.sleep(NODE_READY_POLL_MS);
  }
}
