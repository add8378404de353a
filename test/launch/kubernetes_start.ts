// The launcher's last step: the cluster runs Kubernetes, as an owner would
// set it up. Node 1 is the controller since it bootstrapped; every node gets
// the kubernetes-worker role; the owner's kubeconfig is written with
// `ctl kubeconfig`; the launcher waits, saying so, until every node's Node
// is Ready, and leaves out/cluster/<name>/kubectl (the built kubectl in the
// namespace, as the owner).

import type { Logger } from "../../internal/log/mod.ts";
import { eventually } from "../../internal/testing/mod.ts";
import type { FormedCluster } from "./cluster_formation.ts";
import { CTL_BINARY, KUBECTL_BINARY, writeKubectlWrapper } from "./ctl_wrapper.ts";
import { configureClusterRegistry, HELLO_REPOSITORY, HELLO_TAG } from "./registry.ts";
import type { Cluster } from "./launcher.ts";

const POLL_MS = 3_000;
/** While one wait lasts, how often the launcher says it still waits, and for how long it has. */
const STILL_WAITING_MS = 15_000;

/**
 * Polls `check` until it passes, as eventually does, and says every
 * STILL_WAITING_MS what it still waits for, how long it has waited, and
 * the last answer: nobody should watch one line for minutes.
 */
async function waitSaying(log: Logger, what: string, check: () => Promise<void>, timeoutMs: number): Promise<void> {
  const started = performance.now();
  let said = started;
  await eventually(
    async () => {
      try {
        await check();
      } catch (error) {
        if (performance.now() - said >= STILL_WAITING_MS) {
          said = performance.now();
          log.info(`still waiting for ${what} (${((said - started) / 1000).toFixed(0)} s)`, { last: ((error as Error).message.split("\n")[0] ?? "").slice(0, 160) });
        }
        throw error;
      }
    },
    { timeoutMs, intervalMs: POLL_MS, what },
  );
  log.info(`${what}: after ${((performance.now() - started) / 1000).toFixed(0)} s`);
}

/** The checks an apiserver's /readyz answer says failed ("[-]etcd failed"), or its first line when it names none. */
export function readyzFailing(answer: string): string {
  const failing = [...answer.matchAll(/\[-\]([^\s\\"]+) failed/g)].map((m) => m[1]!);
  if (failing.length > 0) return `failing: ${[...new Set(failing)].join(", ")}`;
  return (answer.trim().split("\n")[0] ?? "").slice(0, 160);
}

/** The nodes whose Node is not Ready, each with its Ready condition's reason, or "no Node yet". */
function notReadyYet(ids: readonly string[], nodes: NodeList["items"], names: ReadonlyMap<string, string>): string[] {
  return ids.flatMap((id) => {
    const node = nodes.find((n) => n.metadata.name === id);
    const ready = node?.status.conditions?.find((c) => c.type === "Ready");
    if (ready?.status === "True") return [];
    const name = names.get(id) ?? id;
    return [`${name} (${node ? (ready?.reason ?? "no Ready condition yet") : "no Node yet"})`];
  });
}

interface NodeList {
  items: { metadata: { name: string }; status: { conditions?: { type: string; status: string; reason?: string }[] } }[];
}

/** Gives every node the worker role and waits until every Node is Ready; returns how long that took, in ms. */
export async function startKubernetes(cluster: Cluster, formed: FormedCluster, options: { timeoutMs: number; logger: Logger }): Promise<number> {
  const started = performance.now();
  const log = options.logger;
  const ids = [...formed.ids.values()];
  const namesById = new Map([...formed.ids].map(([name, id]) => [id, name]));
  // The network's registry first, as an owner would set it up: pods pull from it by name.
  const registry = cluster.registry;
  if (registry) {
    await eventually(
      async () => {
        const result = await configureClusterRegistry(registry, (args, stdin) => cluster.exec([CTL_BINARY, "--config", cluster.dir.ctlConfig, ...args], { stdin, okExitCodes: [0, 1, 2] }));
        if (result.exitCode !== 0) {
          const why = result.stderr.trim().split("\n").at(-1) ?? "";
          log.info("setting the cluster's registry failed; trying again", { why });
          throw new Error(`ctl cluster registry set ${registry.host}: ${why}`);
        }
      },
      { timeoutMs: options.timeoutMs, intervalMs: POLL_MS, what: "the cluster's registry set" },
    );
    log.info(`registry ${registry.host} set: workers pull from it with its CA and login`, { image: `${registry.host}/${HELLO_REPOSITORY}:${HELLO_TAG}` });
  }
  for (const [name, id] of formed.ids) {
    // Right after formation the VMs are busy (node1's apiserver starts under
    // emulation) and a call can miss its deadline: an operator would run it
    // again, and so does the launcher, saying why.
    await eventually(
      async () => {
        const result = await formed.ctl("node", "roles", "set", id, "kubernetes-worker");
        if (result.exitCode !== 0) {
          const why = result.stderr.trim().split("\n").at(-1) ?? "";
          log.info(`${name}: setting the kubernetes-worker role failed; trying again`, { why });
          throw new Error(`ctl node roles set ${id} kubernetes-worker: ${why}`);
        }
      },
      { timeoutMs: options.timeoutMs, intervalMs: POLL_MS, what: `the kubernetes-worker role on ${name}` },
    );
    log.info(`${name}: kubernetes-worker role set`, { node: id });
  }
  // One kubeconfig: its client certificate is good for far longer than
  // the wait, and every `ctl kubeconfig` has the curator issue another,
  // work a starting control plane does not need beside it.
  log.info("getting the owner's kubeconfig (ctl kubeconfig)");
  await waitSaying(
    log,
    "the owner's kubeconfig",
    async () => {
      const written = await formed.ctl("kubeconfig", cluster.dir.kubeconfig);
      if (written.exitCode !== 0) throw new Error(written.stderr.trim().split("\n").at(-1) ?? `exit ${written.exitCode}`);
    },
    options.timeoutMs,
  );
  log.info(
    `waiting for node1's apiserver to be ready (/readyz): ${cluster.accel.accel === "kvm" ? "seconds under KVM" : "minutes under TCG (it loads its binary, builds its APIs and makes its default roles: 3.5 to 7 min on this project's 2-core machine in 2026-11); the checks it still fails are named as it goes"}`,
  );
  await waitSaying(
    log,
    "node1's apiserver to be ready",
    async () => {
      const ready = await cluster.exec([KUBECTL_BINARY, "--kubeconfig", cluster.dir.kubeconfig, "--request-timeout=10s", "get", "--raw", "/readyz"], { okExitCodes: [0, 1] });
      if (ready.stdout.trim() !== "ok") throw new Error(readyzFailing(`${ready.stdout}\n${ready.stderr}`));
    },
    options.timeoutMs,
  );
  writeKubectlWrapper(cluster.dir.kubectlWrapper, { cluster: cluster.name, namespace: cluster.ns.name, kubeconfig: cluster.dir.kubeconfig });
  log.info(`waiting for ${ids.length} Node${ids.length === 1 ? "" : "s"} to be Ready`);
  let lastReady = -1;
  await waitSaying(
    log,
    `every Node Ready`,
    async () => {
      const listed = await cluster.exec([KUBECTL_BINARY, "--kubeconfig", cluster.dir.kubeconfig, "--request-timeout=10s", "get", "nodes", "-o", "json"], { okExitCodes: [0, 1] });
      if (listed.exitCode !== 0) {
        // Until the controller's reconciler has bound the owner to cluster-admin, the apiserver refuses the owner.
        if (/Forbidden/.test(listed.stderr)) throw new Error("the owner is not authorized yet: the controller's reconciler has not made its binding");
        throw new Error(listed.stderr.trim());
      }
      const nodes = (JSON.parse(listed.stdout) as NodeList).items;
      const notReady = notReadyYet(ids, nodes, namesById);
      const ready = ids.length - notReady.length;
      if (ready !== lastReady) log.info(`${ready} of ${ids.length} Nodes Ready`);
      lastReady = ready;
      if (notReady.length > 0) throw new Error(`Ready: ${ready} of ${ids.length}; not yet: ${notReady.join(", ")}`);
    },
    options.timeoutMs,
  );
  // Pods are refused until the controller-manager has made the namespace's
  // default service account: a cluster is ready for workloads once it has.
  log.info("waiting for the default service account (pods need it)");
  await waitSaying(
    log,
    "the default service account",
    async () => {
      const sa = await cluster.exec([KUBECTL_BINARY, "--kubeconfig", cluster.dir.kubeconfig, "--request-timeout=10s", "get", "serviceaccount", "default", "-o", "name"], { okExitCodes: [0, 1] });
      if (sa.stdout.trim() !== "serviceaccount/default") throw new Error(sa.stderr.trim() || "no default service account yet");
    },
    options.timeoutMs,
  );
  return performance.now() - started;
}
