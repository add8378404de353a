// Forming a cluster out of launched nodes, as an owner would with out/ctl:
//
//   node1 (bootstrap) ─▶ UP ─▶ ctl takeownership
//     [─▶ ctl node roles unset node1 kubernetes-controller]  (kubernetesController: false)
//     ─▶ ctl params register
//   node2..N (register parameters) ─▶ "waiting for the owner to approve" ─▶ ctl node approve ─▶ UP
//   ctl node roles set <node> consensus   (one node at a time: etcd takes one learner at a time)
//   ─▶ every consensus node reports its etcd member as a voter
//
// out/ctl runs inside the cluster's network namespace (the only place the
// nodes' addresses are reachable), with its config directory in the cluster
// directory (owner/, which holds the owner key too). Each step says what it
// waits for: formation takes minutes under TCG.

import { join } from "node:path";
import type { Logger } from "../../internal/log/mod.ts";
import { eventually } from "../../internal/testing/mod.ts";
import type { Cluster } from "./launcher.ts";
import { CONSOLE } from "./boot_milestones.ts";
import { CTL_BINARY } from "./ctl_wrapper.ts";
import { NAME_LABEL } from "../../internal/operator/mod.ts";
import type { NodeVm } from "./node_vm.ts";

/** Register nodes print this once registered; the node ID follows. */
const WAITING_FOR_APPROVAL = /waiting for the owner to approve node (node-[0-9a-f]+)/;
/** How often a refused consensus role is asked for again, and the voters counted (each a ctl run). */
const ROLE_RETRY_MS = 1_000;

export interface FormationOptions {
  /** How many nodes get the consensus role (default: all). */
  consensusNodes?: number;
  /** Deadline for each step (TCG is slow). */
  timeoutMs: number;
  logger: Logger;
  /**
   * Whether node1 keeps the kubernetes-controller role the bootstrap gives
   * it (default true). A test about something else takes it away as an
   * owner would, right after taking ownership: under TCG kube-apiserver
   * keeps node1 busy for minutes after every start (4.5 and 5.2 min to
   * /readyz in two CI runs), and a test that reboots node1 pays that again
   * each time, in the time of everything else it measures.
   */
  kubernetesController?: boolean;
  /** Called right after each node is started (to follow its boot). */
  onStart?: (node: NodeVm) => void;
  /** Called as each stage ends (bench/formation.ts times them). */
  onStage?: (stage: FormationStage) => void;
}

/** The stages of formCluster, in order. */
export type FormationStage = "node1 UP" | "owner took ownership" | "every node registered" | "every node UP" | "consensus roles given" | "voters";

export interface FormedCluster {
  /** Node name → node ID. */
  ids: Map<string, string>;
  /** The ctl config directory (owner key and credentials). */
  ctlConfig: string;
  /** Runs out/ctl inside the namespace with the owner's credentials. */
  ctl(...args: string[]): Promise<{ exitCode: number; stdout: string; stderr: string }>;
}

export function ctlFor(cluster: Cluster): FormedCluster["ctl"] {
  // No --owner-key: the key is where ctl looks by default, <config>/owner.key.
  return (...args) => cluster.exec([CTL_BINARY, "--config", cluster.dir.ctlConfig, ...args], { okExitCodes: [0, 1, 2] });
}

/** The node ID a node printed when it came UP. */
function upNodeId(node: NodeVm): string | undefined {
  const line = [...node.console.lines].reverse().find((l) => CONSOLE.nodeUp.test(l.text))?.text ?? "";
  return /\bnode=(node-[0-9a-f]+)/.exec(line)?.[1];
}

export async function formCluster(cluster: Cluster, options: FormationOptions): Promise<FormedCluster> {
  const { logger, timeoutMs } = options;
  const ctl = ctlFor(cluster);
  const ids = new Map<string, string>();
  const [first, ...others] = cluster.nodes;
  if (!first) throw new Error("a cluster needs at least one node");
  const must = async (what: string, ...args: string[]) => {
    const result = await ctl(...args);
    if (result.exitCode !== 0) throw new Error(`ctl ${args.join(" ")} failed (${what}): ${result.stderr.trim()}`);
    return result;
  };

  const start = async (node: NodeVm) => {
    await node.start();
    options.onStart?.(node);
  };
  if (first.state === "stopped") await start(first);
  await first.waitForConsole(CONSOLE.nodeUp, timeoutMs);
  options.onStage?.("node1 UP");
  ids.set(first.name, upNodeId(first)!);
  logger.info(`${first.name} bootstrapped the cluster; taking ownership`, { node: ids.get(first.name) });
  await must("take ownership", "takeownership", first.address);
  logger.info("owner took ownership", { config: cluster.dir.ctlConfig });
  options.onStage?.("owner took ownership");
  if (options.kubernetesController === false) {
    await must("no Kubernetes controller", "node", "roles", "unset", ids.get(first.name)!, "kubernetes-controller");
    logger.info(`took the kubernetes-controller role from ${first.name}: no apiserver runs until a test gives it back`);
  }
  if (others.length === 0) return { ids, ctlConfig: cluster.dir.ctlConfig, ctl };

  logger.info("fetching register parameters for the other nodes");
  const registerParameters = join(cluster.dir.path, "register.pb");
  await must("register parameters", "params", "register", registerParameters);
  for (const node of others) {
    await Bun.write(node.files.parameters, Bun.file(registerParameters));
    await start(node);
  }
  for (const node of others) {
    const line = await node.waitForConsole(WAITING_FOR_APPROVAL, timeoutMs, { milestone: "to register and ask for approval" });
    const id = WAITING_FOR_APPROVAL.exec(line.text)![1]!;
    ids.set(node.name, id);
    await must("approve", "node", "approve", id);
    logger.info(`${node.name} registered; approved it`, { node: id });
  }
  options.onStage?.("every node registered");
  for (const node of others) await node.waitForConsole(CONSOLE.nodeUp, timeoutMs);
  logger.info("every node is UP");
  options.onStage?.("every node UP");
  // The launcher's names as the nodes' name labels: ctl takes them wherever a node ID goes (ctl node logs node2).
  for (const node of cluster.nodes) await must("name label", "node", "label", ids.get(node.name)!, `${NAME_LABEL}=${node.name}`);

  const consensus = others.slice(0, Math.max(0, (options.consensusNodes ?? cluster.nodes.length) - 1));
  for (const node of consensus) {
    const id = ids.get(node.name)!;
    logger.info(`giving ${node.name} the consensus role`, { node: id });
    await eventually(
      async () => {
        const result = await ctl("node", "roles", "set", id, "consensus");
        if (result.exitCode !== 0) {
          // etcd admits one new member at a time; the refusal says to try again.
          if (!/try again/.test(result.stderr)) throw Object.assign(new Error(result.stderr.trim()), { final: true });
          throw new Error(result.stderr.trim());
        }
      },
      { timeoutMs, intervalMs: ROLE_RETRY_MS, what: `consensus role for ${node.name}` },
    );
    logger.info(`${node.name} got the consensus role`, { node: id });
  }
  options.onStage?.("consensus roles given");
  logger.info(`waiting for ${consensus.length + 1} voting etcd members`);
  await waitForVoters(ctl, consensus.length + 1, timeoutMs);
  options.onStage?.("voters");
  logger.info("consensus formed", { voters: consensus.length + 1 });
  // The owner's saved curator list names node1 alone until it is refreshed,
  // as an owner does once the cluster has grown: otherwise every ctl call
  // goes to node1, the busiest node (its controller), with no curator to
  // fail over to.
  if (consensus.length > 0) await eventually(() => must("curator list", "cluster", "info"), { timeoutMs, intervalMs: ROLE_RETRY_MS, what: "ctl cluster info" });
  return { ids, ctlConfig: cluster.dir.ctlConfig, ctl };
}

/** Waits until `count` nodes report their etcd member as a voter (node status, services). */
export async function waitForVoters(ctl: FormedCluster["ctl"], count: number, timeoutMs: number): Promise<void> {
  await eventually(
    async () => {
      const result = await ctl("node", "list", "--json");
      if (result.exitCode !== 0) throw new Error(result.stderr.trim());
      const nodes = JSON.parse(result.stdout) as { services: { name: string; state: string }[] }[];
      const voters = nodes.filter((n) => n.services.some((s) => s.name === "consensus" && s.state === "voter")).length;
      if (voters !== count) throw new Error(`${voters} of ${count} nodes report a voting etcd member`);
    },
    { timeoutMs, intervalMs: ROLE_RETRY_MS, what: `${count} voting etcd members` },
  );
}
