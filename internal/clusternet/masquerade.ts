// The pods' way out of the cluster network: their packets to anywhere that
// is neither a pod nor a peer in the mesh leave with the node's address.
//
//   pod ──▶ another pod (cluster CIDR)           as is, through the mesh
//   pod ──▶ a peer's node address                as is, through the mesh (applyRoutes' rule)
//   pod ──▶ anything else (a controller-only     masqueraded: the node's address on the
//           node, the LAN, the internet)         way out, so the answer finds its way back
//
// Without it a pod's packet leaves the node with the pod's address, which
// nothing outside the mesh has a route for: the answer never comes back.
// kube-proxy masquerades only what its Services need (external traffic,
// hairpins), and the CNI bridge's own ipMasq would need iptables, which the
// image does not have; so the node core keeps one nftables table of its own,
// written whole with `nft -f` (the binary kube-proxy uses too).

import { CLUSTER_CIDR } from "./prefix.ts";
import { runCommand } from "../supervisor/mod.ts";

/** The nftables table the node core owns; nobody else writes it. */
export const MASQUERADE_TABLE = "nodecore_clusternet";

/**
 * The ruleset that masquerades `podPrefix`'s packets leaving through any
 * link but `meshInterface` to anywhere outside `clusterCidr`. Replaces the
 * table as a whole: declaring it first makes the delete safe when it is
 * not there yet, and `nft -f` applies the file in one transaction.
 */
export function masqueradeRuleset(podPrefix: string, meshInterface: string, clusterCidr: string = CLUSTER_CIDR): string {
  return [
    `table ip ${MASQUERADE_TABLE}`,
    `delete table ip ${MASQUERADE_TABLE}`,
    `table ip ${MASQUERADE_TABLE} {`,
    "  chain postrouting {",
    "    type nat hook postrouting priority srcnat; policy accept;",
    `    ip saddr ${podPrefix} ip daddr != ${clusterCidr} oifname != "${meshInterface}" masquerade`,
    "  }",
    "}",
    "",
  ].join("\n");
}

/** Sets the table for this node's pod prefix (nft from the image, /usr/sbin/nft). */
export async function applyMasquerade(podPrefix: string, meshInterface: string, signal?: AbortSignal): Promise<void> {
  await runCommand(["nft", "-f", "-"], { stdin: masqueradeRuleset(podPrefix, meshInterface), ...(signal ? { signal } : {}) });
}

/** Removes the table, if it is there. */
export async function removeMasquerade(signal?: AbortSignal): Promise<void> {
  await runCommand(["nft", "-f", "-"], { stdin: `table ip ${MASQUERADE_TABLE}\ndelete table ip ${MASQUERADE_TABLE}\n`, ...(signal ? { signal } : {}) });
}
