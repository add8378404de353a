// `ctl node reset <node> [--wipe]` (talosctl reset): the node leaves the
// cluster gracefully, then forgets it, then reboots with nothing to join
// with.
//
//   a Kubernetes worker? ─▶ drained (node_power.ts): its Node cordoned and
//     its pods evicted through the Eviction API, PodDisruptionBudgets
//     kept, bare pods too (they go with the node either way); a budget that
//     allows no disruption in time stops the reset before anything else,
//     with the Node uncordoned (--no-drain skips this). Its Node object
//     goes once its record does (the curator's Node pruning)
//   ─▶ a consensus member? ─▶ its consensus role goes (the curator removes its
//     etcd member), and ctl waits until the node runs no member any more
//     (never the last one: the cluster would lose its data)
//   ─▶ its record goes (DeleteNode: a tombstone keeps its keys out)
//   ─▶ NodeManagement.Reset on the node: sealed configuration, held shares
//     and parameters overwritten and deleted; --wipe: its data partition's
//     key slots destroyed ─▶ it reboots into "no parameters"
//
// Each step is said as it is done. A reset cut short before the deletion
// is run again from where it stopped (a role already gone is not asked
// for again); after it, the node is in no list to find it by.

import { Management } from "../../proto/gen/api/management_pb.ts";
import { NoCuratorError } from "../curator/client/mod.ts";
import { dialNodeManagement } from "../nodemgmt/client/mod.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import { explain } from "./explain.ts";
import { DEFAULT_DRAIN_TIMEOUT_S } from "./drain.ts";
import { ownerKubernetes } from "./kubernetes_api.ts";
import { drainBeforeGoing, runsKubernetes } from "./node_power.ts";
import { listNodes, nameOf, type CallSettings } from "./nodes.ts";

/** How long a consensus member gets to leave etcd. */
export const LEAVE_WAIT_MS = 3 * 60_000;
/**
 * How long the node gets to answer the reset itself: it overwrites its
 * ESP's free space (about 160 MiB since the ESP holds two slots), and with
 * --wipe destroys its key slots. A VM under emulation took 22 s (a
 * clean-clone CI, 2026-11-26), past ctl's usual 15 s for a call.
 */
export const RESET_ANSWER_TIMEOUT_MS = 2 * 60_000;
const POLL_MS = 1_000;

export interface ResetResult {
  node: string;
  wiped: boolean;
  erased: string[];
}

export async function resetNode(
  credentials: OwnerCredentials,
  settings: CallSettings,
  id: string,
  wipe: boolean,
  say: { note: (line: string) => void; progress: (line: string) => void },
  drain: { drain: boolean; drainTimeoutMs: number } = { drain: true, drainTimeoutMs: DEFAULT_DRAIN_TIMEOUT_S * 1000 },
): Promise<ResetResult> {
  const nodes = await listNodes(credentials, settings);
  const node = nodes.find((n) => n.id === id);
  if (!node) throw new OperatorError(`the cluster has no node ${id}`);
  if (node.state !== "UP" || !node.address)
    throw new OperatorError(`node ${nameOf(node)} is ${node.state}${node.address ? "" : " with no address"}: only a node that is UP can be reset (ctl node delete removes one that is gone)`);
  await drainBeforeGoing(() => ownerKubernetes(credentials, settings), node, "reset", { ...drain, force: true, kubernetesRuns: runsKubernetes(nodes) }, say);
  const client = dialNodeManagement(node.id, node.address, { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey });
  try {
    if (node.roles.includes("consensus")) {
      const others = nodes.filter((n) => n.id !== id && n.roles.includes("consensus"));
      if (others.length === 0)
        throw new OperatorError(`${nameOf(node)} is the cluster's only consensus member: resetting it would lose the cluster's data (back it up, and give another node the consensus role first)`);
      say.note(`${nameOf(node)} gives up the consensus role`);
      // The curator leader's own node loses its etcd with the role, and its
      // caller the answer: a call that dropped may have been carried out,
      // and the wait below tells.
      await withFailover(Management, credentials, (m) => m.updateNodeRoles({ id, consensusMember: false }, settings), say.progress).catch((err: unknown) => {
        const failures = err instanceof OperatorError && err.cause instanceof NoCuratorError ? err.cause.failures : [];
        if (!failures.some((f) => f.kind === "dropped" || f.kind === "deadline")) throw err;
        say.note(`the call that took the role away went unanswered (${explain(err).line}); waiting to see whether it was carried out`);
      });
      const deadline = Date.now() + LEAVE_WAIT_MS;
      say.progress(`waiting for ${nameOf(node)}'s etcd member to leave ...`);
      for (;;) {
        const left = await client.getEtcdStatus({}, { timeoutMs: settings.timeoutMs }).then(
          () => false,
          (err: unknown) => err instanceof RpcError && err.code === Status.FAILED_PRECONDITION,
        );
        if (left) break;
        if (Date.now() > deadline) throw new OperatorError(`${nameOf(node)}'s etcd member did not leave within ${LEAVE_WAIT_MS / 60_000} min; look at ctl etcd status, and run the reset again`);
        await sleep(POLL_MS);
      }
      say.note(`${nameOf(node)} runs no etcd member any more`);
    }
    await withFailover(Management, credentials, (m) => m.deleteNode({ id }, settings), say.progress);
    say.note(`${nameOf(node)} deleted from the cluster: its record and join key are gone`);
    say.progress(`${nameOf(node)} overwrites what it kept of the cluster${wipe ? ", destroys its data partition's key slots" : ""} and its ESP's free space ...`);
    const answer = await client.reset({ wipe }, { timeoutMs: Math.max(settings.timeoutMs, RESET_ANSWER_TIMEOUT_MS) }).catch((err: unknown) => {
      throw new OperatorError(`${nameOf(node)} left the cluster, but forgetting it failed: ${explain(err).line}; run ctl node reset again while it is up`);
    });
    for (const line of answer.erased) say.note(line);
    return { node: id, wiped: wipe, erased: answer.erased };
  } finally {
    client.close();
  }
}
