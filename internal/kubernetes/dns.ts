// The cluster DNS server of a worker node: CoreDNS, built from its Go
// module (image/upstream), run beside the kubelet as a process of the node
// (service_kubelet.ts), on the node's address, port 53. Pods reach it at
// CLUSTER_DNS_IP: the kube-dns Service the reconciler keeps has no
// selector, lists every worker's server and sends each pod to its own
// node's (internalTrafficPolicy Local).
//
//   pod ──10.96.0.10:53──▶ kube-proxy DNAT ──▶ <its node's address>:53 ──▶ CoreDNS
//                                                     kubernetes plugin ◀── apiserver
//                                                     (as nodecore:cluster-dns)
//
// Names: <service>.<namespace>.svc.cluster.local (ClusterIP, or a headless
// Service's pods), pods' dashed addresses, and the reverse zones. Names
// outside the cluster are forwarded to the node's own resolvers (its DHCP
// lease's) when it has any; a node without resolvers (the test network's
// DHCP gives none) answers those with SERVFAIL.

import { join } from "node:path";
import type { KeyObject, X509Certificate } from "node:crypto";
import { buildKubeconfig } from "./kubeconfig.ts";
import { CLUSTER_DOMAIN, DNS_USER } from "./pki.ts";

export const DNS_PORT = 53;
/** CoreDNS's ready plugin: 200 once the kubernetes plugin has synced. */
export const DNS_READY_PORT = 8181;

export const DNS_FILES = {
  kubeconfig: "cluster-dns.kubeconfig",
  corefile: "Corefile",
} as const;

export interface DnsNode {
  address: string;
  apiserver: string;
  ca: X509Certificate;
  /** nodecore:cluster-dns's client certificate, over `key` (the kubelet's). */
  certificate: X509Certificate;
  key: KeyObject;
  /** The node's own resolvers (from DHCP); names outside the cluster go there. */
  upstreams: readonly string[];
}

/** The Corefile for this node, with file paths inside `dir`. */
export function corefile(dir: string, node: Pick<DnsNode, "address" | "upstreams">): string {
  const lines = [
    `.:${DNS_PORT} {`,
    `    bind ${node.address}`,
    "    errors",
    `    ready ${node.address}:${DNS_READY_PORT}`,
    `    kubernetes ${CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {`,
    `        kubeconfig ${join(dir, DNS_FILES.kubeconfig)}`,
    "        pods insecure",
    "        fallthrough in-addr.arpa ip6.arpa",
    "        ttl 30",
    "    }",
    ...(node.upstreams.length ? [`    forward . ${node.upstreams.join(" ")}`, "    loop"] : []),
    "    cache 30",
    "}",
  ];
  return lines.join("\n") + "\n";
}

export function dnsFiles(dir: string, node: DnsNode): Record<keyof typeof DNS_FILES, string> {
  return {
    kubeconfig: buildKubeconfig({ server: node.apiserver, ca: node.ca, certificate: node.certificate, privateKey: node.key, user: DNS_USER }),
    corefile: corefile(dir, node),
  };
}

export function dnsArgs(dir: string): string[] {
  return ["-conf", join(dir, DNS_FILES.corefile)];
}

export function dnsReady(address: string): string {
  return `http://${address}:${DNS_READY_PORT}/ready`;
}
