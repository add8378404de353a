// Package clusternet: the cluster network of worker nodes. Pods on different
// workers reach each other through a WireGuard mesh that the cluster's own
// control plane distributes, so nothing between nodes travels in clear text.
//
//   curator (internal/curator)                        each worker
//   ──────────────────────────                        ───────────
//   UpdateNodeClusterNetworking(key) ◀──────────────  its WireGuard key (the
//     checks the key, assigns a pod /24 (prefix.ts)    private half never leaves it)
//     record.cluster_networking = {key, prefix} ───▶  Watch(nodes_in_cluster)
//                                                        │ desiredPeers (peers.ts)
//                                                        ▼
//                                             WireGuard peers + routes:
//                                             peer's pod /24 via the tunnel,
//                                             to the address the curator proved
//
// Where this package stands (issue 29): the pod prefixes and the peer
// computation are here and tested; the node's runnable that configures
// the interface, the CNI configuration that follows the prefix, Services
// and DNS are still to come.
//
// Invariants:
//  - A pod prefix is assigned by the curator alone, one node per prefix.
//  - A node's peers are computed from the curator's records only, never
//    from what another node sends it directly.

export { POD_PREFIX_LENGTH, contains, firstFreePodPrefix, formatPrefix, parsePrefix, podPrefixCount, type Prefix } from "./prefix.ts";
export { WIREGUARD_PORT, desiredPeers, peerChanges, type Peer, type Skipped } from "./peers.ts";
