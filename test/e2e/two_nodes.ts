// The two-node cluster that the time steps and the restore steps share
// (node1 the only consensus node, node2 a member, no Kubernetes): formed
// once, by the time steps (two_nodes_1_time.e2e.ts, which need node2's
// clock off and the time server out of its reach while it registers), then
// handed to the restore steps (two_nodes_2_restore.e2e.ts), which back it
// up, lose it and restore it, and end it. Under TCG a formation costs one
// to two minutes, so one is saved. Either file still runs alone
// (`bun test/e2e/run.ts restore`): the restore steps form a cluster of
// their own when none was handed over.

import type { Cluster, FormedCluster } from "../launch/mod.ts";
import { registry } from "./harness.ts";

export interface TwoNodes {
  cluster: Cluster;
  formed: FormedCluster;
}

/** The file whose steps take the cluster over. */
const TAKER = "two_nodes_2_restore.e2e.ts";

let handed: TwoNodes | undefined;

/**
 * At the end of the time steps: keeps the cluster for the restore steps if
 * they run next and every time step passed (`whole`); otherwise closes it,
 * and the restore steps form their own.
 */
export async function handOver(cluster: Cluster | undefined, formed: FormedCluster | undefined, whole: boolean): Promise<void> {
  if (cluster && formed && whole && registry.tests.some((t) => t.file === TAKER)) {
    handed = { cluster, formed };
    return;
  }
  await cluster?.close();
}

/** The cluster the time steps handed over, once (undefined if none was). */
export function takeOver(): TwoNodes | undefined {
  const taken = handed;
  handed = undefined;
  return taken;
}
