// kube-proxy on a worker node: Services (ClusterIP, NodePort) in nftables
// mode, beside the kubelet, with the same apiserver and the same renewal
// (service_kubelet.ts runs it), under its own name: system:kube-proxy,
// which Kubernetes' default RBAC binds to system:node-proxier.
//
// Choices:
//  - nftables mode, not iptables: the image carries Debian's `nft` (the
//    initramfs, with its libraries), and the kernel's nf_tables modules;
//    no iptables, no ipset.
//  - the cluster CIDR is the mesh's (internal/clusternet, CLUSTER_CIDR): traffic from it is a
//    pod's, everything else going to a Service is masqueraded;
//  - kube-proxy leaves the kernel's conntrack settings alone (conntrack
//    maxPerCore 0, timeouts 0): the node's are small on purpose;
//  - health on the node's address (10256), metrics on loopback only.

import { join } from "node:path";
import type { KeyObject, X509Certificate } from "node:crypto";
import { buildKubeconfig } from "./kubeconfig.ts";
import { CLUSTER_CIDR } from "../clusternet/mod.ts";
import { PROXY_USER } from "./pki.ts";

export const PROXY_HEALTHZ_PORT = 10256;
export const PROXY_METRICS_PORT = 10249;

export const PROXY_FILES = {
  kubeconfig: "kube-proxy.kubeconfig",
  config: "kube-proxy-config.json",
} as const;

export interface ProxyNode {
  nodeId: string;
  address: string;
  apiserver: string;
  ca: X509Certificate;
  /** system:kube-proxy's client certificate, over `key` (the kubelet's). */
  certificate: X509Certificate;
  key: KeyObject;
}

/** The KubeProxyConfiguration for this node. */
export function proxyConfig(dir: string, node: Pick<ProxyNode, "nodeId" | "address">): Record<string, unknown> {
  return {
    apiVersion: "kubeproxy.config.k8s.io/v1alpha1",
    kind: "KubeProxyConfiguration",
    clientConnection: { kubeconfig: join(dir, PROXY_FILES.kubeconfig) },
    mode: "nftables",
    clusterCIDR: CLUSTER_CIDR,
    detectLocalMode: "ClusterCIDR",
    hostnameOverride: node.nodeId,
    healthzBindAddress: `${node.address}:${PROXY_HEALTHZ_PORT}`,
    metricsBindAddress: `127.0.0.1:${PROXY_METRICS_PORT}`,
    conntrack: { maxPerCore: 0, min: 0, tcpEstablishedTimeout: "0s", tcpCloseWaitTimeout: "0s" },
  };
}

/** Every file's contents, by name. */
export function proxyFiles(dir: string, node: ProxyNode): Record<keyof typeof PROXY_FILES, string> {
  return {
    kubeconfig: buildKubeconfig({ server: node.apiserver, ca: node.ca, certificate: node.certificate, privateKey: node.key, user: PROXY_USER }),
    config: JSON.stringify(proxyConfig(dir, node), null, 2) + "\n",
  };
}

export function proxyArgs(dir: string): string[] {
  return [`--config=${join(dir, PROXY_FILES.config)}`];
}

/** Where kube-proxy says it is healthy (200 once it has synced its rules). */
export function proxyHealthz(address: string): string {
  return `http://${address}:${PROXY_HEALTHZ_PORT}/healthz`;
}
