// The kubelet's files and command line on a worker node: a
// KubeletConfiguration (JSON, which the kubelet reads as YAML), its
// kubeconfig, and its certificates, all on tmpfs; its root on the data
// partition.
//
// Choices, after the upstream documentation's secure setup and
// Metropolis's kubelet:
//  - authentication by client certificate (the Kubernetes CA) or the
//    apiserver's webhook; anonymous requests refused; authorization by
//    webhook (the apiserver's Node and RBAC authorizers);
//  - its own serving certificate (from the curator, named for the node and
//    its address), no certificate rotation or TLS bootstrap: the curator is
//    the only signer;
//  - containerd's CRI socket; the cgroup driver is containerd's (cgroupfs;
//    the kubelet asks it through CRI), with the pods' cgroups below the
//    runtime's cgroup, so that taking the role away empties one cgroup;
//  - eviction thresholds for a small node (a 1 GiB data partition);
//  - the node is registered under its node ID (the certificate's name), at
//    its node address.

import { join } from "node:path";
import type { X509Certificate } from "node:crypto";
import type { KeyObject } from "node:crypto";
import { privateKeyPem, toPem } from "../pki/mod.ts";
import { buildKubeconfig } from "./kubeconfig.ts";
import { CLUSTER_DOMAIN, kubeletUser } from "./pki.ts";
import { credentialProviderArgs } from "./registries.ts";

export const KUBELET_PORT = 10250;
export const KUBELET_HEALTHZ_PORT = 10248;
/** The cluster DNS service's address: the tenth of the Service network (SERVICE_CIDR), as kubeadm has it. */
export const CLUSTER_DNS_IP = "10.96.0.10";

export const KUBELET_FILES = {
  ca: "ca.crt",
  certificate: "kubelet.crt",
  key: "kubelet.key",
  kubeconfig: "kubelet.kubeconfig",
  config: "kubelet-config.json",
  // The pods' resolver configuration until the cluster has DNS: empty.
  resolvConf: "resolv.conf",
} as const;

/**
 * Where the system tree keeps the tools the kubelet runs by name: mount and
 * umount (for every pod's secret and projected volumes), busybox's. The
 * node has no util-linux of its own.
 */
export const KUBELET_TOOLS_DIR = "/usr/libexec/nodecore";
export const KUBELET_TOOLS = ["mount", "umount"] as const;

/** The kubelet's PATH below a system tree: its tools first. */
export function kubeletPath(system: string): string {
  return [`${system}${KUBELET_TOOLS_DIR}`, `${system}/usr/bin`, `${system}/usr/sbin`, "/usr/bin", "/usr/sbin", "/bin", "/sbin"].join(":");
}

export interface KubeletNode {
  nodeId: string;
  /** The node's address: the kubelet serves on it and registers it. */
  address: string;
  /** containerd's socket (CRI enabled). */
  containerdSocket: string;
  /** The pods' cgroup parent, as a path from the hierarchy's root ("/nodecore-runtime/pods"). */
  cgroupRoot: string;
  /** Where the containers' logs go (the data partition: a VM's /var is memory). */
  podLogsDir: string;
  /** The apiserver the kubelet talks to. */
  apiserver: string;
  /** From the curator: the CA, the serving and client certificates, over `key`. */
  ca: X509Certificate;
  server: X509Certificate;
  client: X509Certificate;
  key: KeyObject;
}

/** The KubeletConfiguration for this node, with file paths inside `dir`. */
export function kubeletConfig(dir: string, node: KubeletNode): Record<string, unknown> {
  return {
    apiVersion: "kubelet.config.k8s.io/v1beta1",
    kind: "KubeletConfiguration",
    address: node.address,
    port: KUBELET_PORT,
    readOnlyPort: 0,
    healthzBindAddress: node.address,
    healthzPort: KUBELET_HEALTHZ_PORT,
    tlsCertFile: join(dir, KUBELET_FILES.certificate),
    tlsPrivateKeyFile: join(dir, KUBELET_FILES.key),
    tlsMinVersion: "VersionTLS12",
    rotateCertificates: false,
    serverTLSBootstrap: false,
    authentication: {
      anonymous: { enabled: false },
      webhook: { enabled: true },
      x509: { clientCAFile: join(dir, KUBELET_FILES.ca) },
    },
    authorization: { mode: "Webhook" },
    containerRuntimeEndpoint: `unix://${node.containerdSocket}`,
    cgroupRoot: node.cgroupRoot,
    clusterDomain: CLUSTER_DOMAIN,
    clusterDNS: [CLUSTER_DNS_IP],
    resolvConf: join(dir, KUBELET_FILES.resolvConf),
    podLogsDir: node.podLogsDir,
    failSwapOn: false,
    registerNode: true,
    evictionHard: { "memory.available": "50Mi", "nodefs.available": "5%", "imagefs.available": "5%", "nodefs.inodesFree": "5%" },
  };
}

/** Every file's contents, by name. */
export function kubeletFiles(dir: string, node: KubeletNode): Record<keyof typeof KUBELET_FILES, string> {
  return {
    ca: toPem(node.ca),
    certificate: toPem(node.server),
    key: privateKeyPem(node.key),
    kubeconfig: buildKubeconfig({ server: node.apiserver, ca: node.ca, certificate: node.client, privateKey: node.key, user: kubeletUser(node.nodeId) }),
    config: JSON.stringify(kubeletConfig(dir, node), null, 2) + "\n",
    resolvConf: "",
  };
}

export function kubeletArgs(dir: string, rootDir: string, node: Pick<KubeletNode, "nodeId" | "address">): string[] {
  return [
    `--config=${join(dir, KUBELET_FILES.config)}`,
    `--kubeconfig=${join(dir, KUBELET_FILES.kubeconfig)}`,
    `--root-dir=${rootDir}`,
    `--hostname-override=${node.nodeId}`,
    `--node-ip=${node.address}`,
    // Registry logins from the cluster's configuration, asked for at every pull (registries.ts).
    ...credentialProviderArgs(dir),
  ];
}
