// Which WireGuard peers a node has: computed from the cluster's records, as
// the curator's watch delivers them, and nothing else.
//
//   Watch(nodes_in_cluster) ──▶ records by node ID ──desiredPeers──▶ Peer[]
//                                                        │
//                    current peers (the interface) ──peerChanges──▶ add / update / remove
//
// A node is a peer when the records say all of this about it: it is UP, it
// holds the kubernetes-worker role, it reported a WireGuard key and the
// curator assigned it a pod prefix, and its status names the address it
// dials the cluster from (which the curator held against the call's source
// address). A deleted node is not in the records, so it is no peer.
//
// A peer may send through the tunnel from its pod prefix (a /24 inside the
// cluster CIDR) and from its node address (replies of the node itself). Its
// pod prefix is routed to it, and so is its address for the pods' packets
// alone (service.ts, applyRoutes); a prefix that two records name (which
// the curator's claim keys rule out) goes to neither, so that no record can
// pull another node's pods' traffic to itself.

import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { isIPv4 } from "../network/mod.ts";
import { CLUSTER_CIDR, contains, parsePrefix, POD_PREFIX_LENGTH } from "./prefix.ts";

/** The UDP port every node's WireGuard interface listens on. */
export const WIREGUARD_PORT = 51820;

/** One WireGuard peer, as the interface is configured with it. */
export interface Peer {
  nodeId: string;
  /** The peer's public key, base64 (as `wg` writes and reads it). */
  publicKey: string;
  /** "address:port" of the peer's WireGuard interface. */
  endpoint: string;
  /**
   * What the peer may send from: its pod prefix, and its node address (/32)
   * for replies from the node itself (a Service whose endpoint is the node's
   * address, such as the apiserver, answers a pod on another node through
   * the mesh). The pod prefix is routed into the mesh for everyone, the
   * address for the local pods only (service.ts).
   */
  allowedIps: string[];
  /** The peer's pod prefix: routed to it through the mesh. */
  podPrefix: string;
}

/** Why a node of the records is not a peer, for the log and `ctl node services`. */
export interface Skipped {
  nodeId: string;
  reason: string;
}

/** The peers `self` should have, sorted by node ID, and the nodes left out with why. */
export function desiredPeers(self: string, nodes: Iterable<Node>, cluster: string = CLUSTER_CIDR): { peers: Peer[]; skipped: Skipped[] } {
  const outer = parsePrefix(cluster);
  if (!outer) throw new Error(`cluster CIDR ${cluster} is not an IPv4 prefix`);
  const candidates: Peer[] = [];
  const skipped: Skipped[] = [];
  for (const node of nodes) {
    if (node.id === self) continue;
    const skip = (reason: string) => skipped.push({ nodeId: node.id, reason });
    if (!node.roles?.kubernetesWorker) continue; // not part of the mesh at all: no note
    const networking = node.clusterNetworking;
    if (node.state !== NodeState.UP) {
      skip(`it is ${NodeState[node.state] ?? node.state}, not UP`);
      continue;
    }
    if (!networking || networking.wireguardPublicKey.length === 0) {
      skip("it has not reported a WireGuard key yet");
      continue;
    }
    if (networking.wireguardPublicKey.length !== 32) {
      skip(`its WireGuard key is ${networking.wireguardPublicKey.length} bytes, not 32`);
      continue;
    }
    const prefix = parsePrefix(networking.podPrefix);
    if (!prefix || prefix.length !== POD_PREFIX_LENGTH || !contains(outer, prefix)) {
      skip(`its pod prefix ${JSON.stringify(networking.podPrefix)} is not a /${POD_PREFIX_LENGTH} of ${cluster}`);
      continue;
    }
    const address = node.status?.externalAddress ?? "";
    if (!isIPv4(address)) {
      skip(address ? `its address ${JSON.stringify(address)} is not an IPv4 address` : "it has not reported its address yet");
      continue;
    }
    candidates.push({
      nodeId: node.id,
      publicKey: Buffer.from(networking.wireguardPublicKey).toString("base64"),
      endpoint: `${address}:${WIREGUARD_PORT}`,
      allowedIps: [networking.podPrefix, `${address}/32`],
      podPrefix: networking.podPrefix,
    });
  }
  // A prefix (or key) named twice goes to neither: the records contradict themselves.
  const count = (pick: (p: Peer) => string) => {
    const seen = new Map<string, number>();
    for (const p of candidates) seen.set(pick(p), (seen.get(pick(p)) ?? 0) + 1);
    return seen;
  };
  const prefixes = count((p) => p.podPrefix);
  const keys = count((p) => p.publicKey);
  const peers: Peer[] = [];
  for (const p of candidates) {
    if (prefixes.get(p.podPrefix)! > 1) skipped.push({ nodeId: p.nodeId, reason: `its pod prefix ${p.podPrefix} is named by another node too` });
    else if (keys.get(p.publicKey)! > 1) skipped.push({ nodeId: p.nodeId, reason: "its WireGuard key is another node's too" });
    else peers.push(p);
  }
  const byId = (a: { nodeId: string }, b: { nodeId: string }) => (a.nodeId < b.nodeId ? -1 : a.nodeId > b.nodeId ? 1 : 0);
  return { peers: peers.sort(byId), skipped: skipped.sort(byId) };
}

/** What turns the `current` peers into the `desired` ones (matched by public key, as WireGuard knows them). */
export function peerChanges(current: readonly Pick<Peer, "publicKey" | "endpoint" | "allowedIps">[], desired: readonly Peer[]): { set: Peer[]; remove: string[] } {
  const now = new Map(current.map((p) => [p.publicKey, p]));
  const wanted = new Set(desired.map((p) => p.publicKey));
  const set = desired.filter((p) => {
    const was = now.get(p.publicKey);
    return !was || was.endpoint !== p.endpoint || [...was.allowedIps].sort().join() !== [...p.allowedIps].sort().join();
  });
  const remove = current.filter((p) => !wanted.has(p.publicKey)).map((p) => p.publicKey);
  return { set, remove };
}
