// Kubernetes's version-skew policy, as `ctl cluster update` keeps it
// (issue 50): the update goes controllers first (cluster_update.ts), so
// while it runs, the new version's apiservers meet the old version's
// apiservers and kubelets. The policy allows
//   - apiservers within one minor of each other;
//   - kubelets no newer than any apiserver they talk to (and at most three
//     minors older).
// So a bundle's Kubernetes may be one minor newer than the oldest node's
// that runs Kubernetes, never two (a skipped minor), and never a minor
// older than the newest one's (its downgraded apiservers would meet newer
// kubelets). Patch versions do not count. A node whose software does not
// say its Kubernetes version (older than this check), and a bundle that
// does not, are named as not checked, not refused.

import { nameOf } from "./nodes.ts";
import type { NodeSummary } from "./format.ts";

/** "v1.37.2" → { major: 1, minor: 37 }; undefined when it is not such a version. */
export function kubernetesMinor(version: string | undefined): { major: number; minor: number } | undefined {
  const m = /^v(\d{1,3})\.(\d{1,4})\.\d{1,5}(?:[-+][0-9A-Za-z.-]{0,64})?$/.exec(version ?? "");
  return m ? { major: Number(m[1]), minor: Number(m[2]) } : undefined;
}

export interface SkewVerdict {
  /** Why the update would break the policy; undefined when it would not (or could not be checked). */
  refusal?: string;
  /** What could not be checked, one line each. */
  unchecked: string[];
}

/** Whether updating `nodes` to a bundle carrying Kubernetes `target` keeps the version-skew policy. Only nodes with a Kubernetes role count. Pure. */
export function kubernetesSkew(nodes: readonly NodeSummary[], target: string | undefined): SkewVerdict {
  const running = nodes.filter((n) => n.roles.includes("kubernetes-controller") || n.roles.includes("kubernetes-worker"));
  if (running.length === 0) return { unchecked: [] };
  const wanted = kubernetesMinor(target);
  if (!wanted) return { unchecked: [`the bundle does not say which Kubernetes it carries${target ? ` (${JSON.stringify(target.slice(0, 40))})` : ""}: the version-skew policy is not checked`] };
  const unchecked: string[] = [];
  const known: { node: NodeSummary; version: string; minor: number }[] = [];
  for (const node of running) {
    const v = kubernetesMinor(node.kubernetesVersion);
    if (!v) unchecked.push(`${nameOf(node)} does not say which Kubernetes it runs: not checked against it`);
    else if (v.major !== wanted.major) return { refusal: `the bundle carries Kubernetes ${target}, another major version than ${nameOf(node)}'s ${node.kubernetesVersion}`, unchecked };
    else known.push({ node, version: node.kubernetesVersion!, minor: v.minor });
  }
  if (known.length === 0) return { unchecked };
  const oldest = known.reduce((a, b) => (b.minor < a.minor ? b : a));
  const newest = known.reduce((a, b) => (b.minor > a.minor ? b : a));
  if (wanted.minor > oldest.minor + 1) {
    return {
      refusal: `the bundle carries Kubernetes ${target}, but ${nameOf(oldest.node)} runs ${oldest.version}: that skips ${wanted.major}.${oldest.minor + 1}, and the new apiservers would meet ${oldest.version}'s, more than one minor apart; update to a bundle with ${wanted.major}.${oldest.minor + 1} first`,
      unchecked,
    };
  }
  if (wanted.minor < newest.minor) {
    return {
      refusal: `the bundle carries Kubernetes ${target}, a minor older than ${nameOf(newest.node)}'s ${newest.version}: the controllers go first, and their older apiservers would meet newer kubelets, which Kubernetes does not support`,
      unchecked,
    };
  }
  return { unchecked };
}
