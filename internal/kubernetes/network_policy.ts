// NetworkPolicy, enforced on every worker by kube-network-policies
// (sigs.k8s.io/kube-network-policies, built under a main of ours:
// image/upstream/kube-network-policies), run beside kube-proxy with the
// same apiserver and the same renewal (service_kubelet.ts), as
// nodecore:network-policy.
//
//   a new connection's first packet, from or to a local pod that some policy selects
//     ──(inet table kube-network-policies, postrouting, before SNAT)──▶ NFQUEUE 100
//     ──▶ the enforcer: the source pod's egress policies, then the destination
//         pod's ingress policies (pods, namespaces, ports, ipBlocks) ──▶ accept | drop
//   every later packet of the connection: accepted by conntrack (established)
//
// Why this one: it is a kubernetes-sigs project, the one Talos deploys
// since 1.13, judges packets with the API's own semantics (the library is
// upstream's policy evaluator, not a translation into rules of ours), and
// needs nothing from the node but nftables and a queue. What the node adds:
//  - the kernel modules nft_queue and nfnetlink_queue (image/modules.ts),
//    and br_netfilter: pods on one node talk through the node's bridge,
//    which switches their frames below IP, so without it no netfilter hook
//    ever sees pod-to-pod traffic on the same node. With
//    net.bridge.bridge-nf-call-iptables (and its IPv6 twin) set, bridged
//    IP packets pass the IP hooks too (enableBridgeFilter), which also
//    gives kube-proxy's conntrack the replies of a Service's same-node
//    backend;
//  - no pod: the enforcer is a node process with a client certificate, so a
//    policy can never select it, and no user can delete it.
//
// Its guarantees and limits, as upstream's v0.8.0 has them:
//  - fail closed: a connection that the queue holds while no enforcer reads
//    it is dropped, not let through (only while the enforcer restarts, and
//    only for pods some policy selects);
//  - a pod no policy selects is never queued: default allow;
//  - connections already established when a policy changes are not cut;
//  - traffic the node's root processes make (the kubelet's probes, the
//    node's own services) is never judged;
//  - the cluster DNS is a node process here (dns.ts), not a pod: a policy
//    that allows egress "to the kube-dns pods" matches nothing. A pod with
//    egress rules needs one for port 53 (UDP and TCP) with no `to`, or with
//    an ipBlock of the nodes' addresses. (Queries are judged as they enter
//    the node, after the Service's DNAT: upstream's way round a conntrack
//    race in kernels before 6.12.)

import { join } from "node:path";
import { writeFileSync } from "node:fs";
import type { KeyObject, X509Certificate } from "node:crypto";
import { buildKubeconfig } from "./kubeconfig.ts";
import { NETWORK_POLICY_USER } from "./pki.ts";

/** Where the enforcer answers /readyz and /metrics: loopback only. */
export const NETWORK_POLICY_PORT = 10262;

export const NETWORK_POLICY_FILES = { kubeconfig: "network-policy.kubeconfig" } as const;

/** The nfqueue new connections are sent to (upstream's default). */
export const NETWORK_POLICY_QUEUE = 100;

export interface NetworkPolicyNode {
  nodeId: string;
  apiserver: string;
  ca: X509Certificate;
  /** nodecore:network-policy's client certificate, over `key` (the kubelet's). */
  certificate: X509Certificate;
  key: KeyObject;
}

/** What the enforcer reads, and the events it may write. */
export const NETWORK_POLICY_ROLE = "nodecore:network-policy";
export const NETWORK_POLICY_ROLE_RULES = [
  { apiGroups: [""], resources: ["pods", "namespaces"], verbs: ["list", "watch"] },
  { apiGroups: ["networking.k8s.io"], resources: ["networkpolicies"], verbs: ["list", "watch"] },
  { apiGroups: ["", "events.k8s.io"], resources: ["events"], verbs: ["create", "patch", "update"] },
];
export const NETWORK_POLICY_BINDING = { name: "nodecore:network-policy", user: NETWORK_POLICY_USER, clusterRole: NETWORK_POLICY_ROLE } as const;

export function networkPolicyFiles(node: NetworkPolicyNode): Record<keyof typeof NETWORK_POLICY_FILES, string> {
  return { kubeconfig: buildKubeconfig({ server: node.apiserver, ca: node.ca, certificate: node.certificate, privateKey: node.key, user: NETWORK_POLICY_USER }) };
}

export function networkPolicyArgs(dir: string, nodeId: string): string[] {
  return [
    `--kubeconfig=${join(dir, NETWORK_POLICY_FILES.kubeconfig)}`,
    // The Node's name, as the kubelet registers it: its local pods are those bound to it.
    `--node-name=${nodeId}`,
    `--listen=127.0.0.1:${NETWORK_POLICY_PORT}`,
    `--nfqueue-id=${NETWORK_POLICY_QUEUE}`,
  ];
}

/** 200 once the enforcer has listed pods, namespaces and policies (main.go). */
export function networkPolicyReady(): string {
  return `http://127.0.0.1:${NETWORK_POLICY_PORT}/readyz`;
}

/** The sysctls that send bridged IP packets through the IP hooks; br_netfilter makes them. */
export const BRIDGE_FILTER_SYSCTLS = ["net/bridge/bridge-nf-call-iptables", "net/bridge/bridge-nf-call-ip6tables"] as const;

export class BridgeFilterError extends Error {
  override name = "BridgeFilterError";
}

/**
 * Lets the IP hooks see pod-to-pod packets on this node's bridge. The
 * module is loaded at boot (modules.load); a node without it says so
 * rather than enforce policies only between nodes.
 */
export function enableBridgeFilter(procSys = "/proc/sys"): void {
  for (const name of BRIDGE_FILTER_SYSCTLS) {
    try {
      writeFileSync(join(procSys, name), "1\n");
    } catch (error) {
      throw new BridgeFilterError(`cannot set ${name.replaceAll("/", ".")} (is br_netfilter loaded?): ${(error as Error).message}`);
    }
  }
}
