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
//                                             to the address the curator proved;
//                                             the pods' traffic to a peer's
//                                             address via the tunnel too, and
//                                             to anywhere else masqueraded
//
// service.ts is the runnable a worker with a kubelet runs (roleserve's
// Kubernetes worker): it keeps the private key on the data partition,
// reports the public key, takes the prefix (the pods' CNI network,
// internal/containerd), and keeps the device's peers and routes equal to
// what the records say. Netlink does the work (wireguard.ts; links and
// routes: internal/network): the image has no iproute2 and no `wg`.
//
// Services (kube-proxy) and the cluster DNS are internal/kubernetes'; they
// reach across nodes through this mesh.
//
// Invariants:
//  - A pod prefix is assigned by the curator alone, one node per prefix.
//  - A node's peers are computed from the curator's records only, never
//    from what another node sends it directly.

export { CLUSTER_CIDR, POD_PREFIX_LENGTH, contains, firstFreePodPrefix, formatPrefix, parsePrefix, podPrefixCount, type Prefix } from "./prefix.ts";
export { WIREGUARD_PORT, desiredPeers, peerChanges, type Peer, type Skipped } from "./peers.ts";
export {
  HANDSHAKE_STALE_MS,
  INTERFACE_NAME,
  MESH_RULE_PRIORITY,
  MESH_TABLE,
  applyRoutes,
  clusterNetService,
  describePeers,
  leaveMesh,
  loadOrCreateKey,
  meshAddress,
  type ClusterNetOptions,
} from "./service.ts";
export { MASQUERADE_TABLE, applyMasquerade, masqueradeRuleset, removeMasquerade } from "./masquerade.ts";
export { PERSISTENT_KEEPALIVE_S, readDevice, setDevice, type DeviceChange, type PeerState } from "./wireguard.ts";
