// The short way to run out/ctl against a launched cluster: a script next to
// the cluster (out/cluster/<name>/ctl) that enters the cluster's network
// namespace, the only place the nodes' addresses exist, and hands out/ctl
// the owner's config directory:
//
//   out/cluster/dev/ctl node list
//     = ip netns exec nodecore-dev <repo>/out/ctl --config <repo>/out/cluster/dev/owner node list
//
// The namespace name is stable for a cluster name, so the script stays right
// across launches; between them it says that the cluster is not running.

import { chmodSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { DEFAULT_SYSTEM_TREE, REPO_ROOT } from "../../image/mod.ts";
import { NETNS_DIR } from "./network_namespace.ts";

export const CTL_BINARY = join(REPO_ROOT, "out", "ctl");

export interface CtlWrapperSpec {
  cluster: string;
  /** The cluster's network namespace; none for node processes on loopback. */
  namespace?: string;
  /** out/ctl's --config directory. */
  config: string;
  ctl?: string;
}

/** Quotes a word for sh. */
function quote(word: string): string {
  return `'${word.replaceAll("'", `'\\''`)}'`;
}

/**
 * A script that runs `command "$@"` inside the cluster's namespace, as root
 * (entering a namespace needs it, as the launcher did), and says plainly
 * when the cluster is not running.
 */
function inNamespaceScript(cluster: string, namespace: string, tool: string, what: string, command: string): string {
  const ns = quote(namespace);
  return [
    "#!/bin/sh",
    `# ${what}, inside its network namespace. Written by test/launch.`,
    "set -eu",
    `[ "$(id -u)" -eq 0 ] || exec sudo "$0" "$@"`,
    `if [ ! -e ${quote(NETNS_DIR)}/${ns} ]; then`,
    `  echo "${tool}: cluster ${cluster} is not running (no network namespace ${namespace}); launch it with: bun run cluster --name ${cluster}" >&2`,
    "  exit 1",
    "fi",
    `exec ip netns exec ${ns} ${command} "$@"`,
    "",
  ].join("\n");
}

/** The wrapper's text. */
export function ctlWrapperScript(spec: CtlWrapperSpec): string {
  if (spec.namespace === undefined) {
    return [
      "#!/bin/sh",
      `# out/ctl as the owner of cluster ${spec.cluster} (node processes on loopback). Written by test/launch.`,
      `exec ${quote(spec.ctl ?? CTL_BINARY)} --config ${quote(spec.config)} "$@"`,
      "",
    ].join("\n");
  }
  return inNamespaceScript(spec.cluster, spec.namespace, "ctl", `out/ctl as the owner of cluster ${spec.cluster}`, `${quote(spec.ctl ?? CTL_BINARY)} --config ${quote(spec.config)}`);
}

/** Writes the wrapper to path, executable. */
export function writeCtlWrapper(path: string, spec: CtlWrapperSpec): void {
  writeFileSync(path, ctlWrapperScript(spec));
  chmodSync(path, 0o755);
}

/** The system tree's kubectl (built from the k8s.io/kubernetes module, the same version as the cluster). */
export const KUBECTL_BINARY = join(REPO_ROOT, DEFAULT_SYSTEM_TREE, "kubernetes", "bin", "kubectl");

/** The system tree's etcdctl (built from the etcd module, the same version as the nodes' etcd). */
export const ETCDCTL_BINARY = join(REPO_ROOT, DEFAULT_SYSTEM_TREE, "usr", "bin", "etcdctl");

/**
 * The same for kubectl: out/cluster/<name>/kubectl runs the built kubectl
 * inside the cluster's namespace with the owner's kubeconfig (written by
 * `ctl kubeconfig`).
 */
export function kubectlWrapperScript(spec: { cluster: string; namespace: string; kubeconfig: string; kubectl?: string }): string {
  return inNamespaceScript(
    spec.cluster,
    spec.namespace,
    "kubectl",
    `kubectl as the owner of cluster ${spec.cluster}`,
    `${quote(spec.kubectl ?? KUBECTL_BINARY)} --kubeconfig ${quote(spec.kubeconfig)}`,
  );
}

export function writeKubectlWrapper(path: string, spec: Parameters<typeof kubectlWrapperScript>[0]): void {
  writeFileSync(path, kubectlWrapperScript(spec));
  chmodSync(path, 0o755);
}
