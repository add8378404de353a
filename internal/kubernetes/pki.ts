// The Kubernetes PKI: its CAs, the control plane's client certificates, the
// service-account key, and the certificates issued per node at launch.
//
//   Kubernetes CA  CN="nodecore kubernetes CA"           (in etcd, created once)
//   ├─ kube-apiserver-kubelet-client                     (in etcd) apiserver → kubelets;
//   │                                                      bound to system:kubelet-api-admin
//   ├─ system:kube-controller-manager                    (in etcd) its default RBAC user
//   ├─ system:kube-scheduler                             (in etcd) its default RBAC user
//   ├─ nodecore:admin  O=system:masters                  (in etcd) the node core's own client:
//   │                                                      readiness checks and the reconciler
//   ├─ apiserver (server)                                (per controller node, at launch: SANs
//   │                                                      of the service IP, localhost and the
//   │                                                      node's address)
//   ├─ controller-manager / scheduler (server)           (per controller node, at launch)
//   └─ system:node:<id> O=system:nodes (server, client)  (per worker node, by the curator)
//   front-proxy CA                                       (in etcd) a CA of its own, so that a
//   └─ front-proxy-client                                  client certificate of the Kubernetes CA
//                                                          can never pass as the proxy
//   service-account key: ECDSA P-256                     (in etcd) Ed25519 is not accepted there
//
// Everything else is Ed25519, as in the rest of the cluster. The stored part
// is one etcd key written by a single create-if-absent transaction: whoever
// asks first (a controller, or the curator signing a kubelet certificate)
// creates it, everyone else reads the winner's. A consensus member can read
// it, as it can read the cluster CA: only consensus nodes hold etcd
// credentials, and only they run the Kubernetes controller.

import { X509Certificate, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from "node:crypto";
import type { Etcd3, Namespace } from "etcd3";
import { createCertificate, generateKeyPair, privateKeyPem, toPem, type CA, type CertificateKind } from "../pki/mod.ts";

export const KUBERNETES_CA_COMMON_NAME = "nodecore kubernetes CA";
export const FRONT_PROXY_CA_COMMON_NAME = "nodecore kubernetes front-proxy CA";
export const APISERVER_KUBELET_CLIENT = "kube-apiserver-kubelet-client";
export const CONTROLLER_MANAGER_USER = "system:kube-controller-manager";
export const SCHEDULER_USER = "system:kube-scheduler";
export const FRONT_PROXY_CLIENT = "front-proxy-client";
/** The node core's own client: readiness checks and the reconciler. */
export const ADMIN_USER = "nodecore:admin";
export const MASTERS_GROUP = "system:masters";
/** The cluster owner in Kubernetes (ctl kubeconfig); the reconciler binds it to cluster-admin. */
export const OWNER_USER = "nodecore:owner";
export const NODES_GROUP = "system:nodes";

/** The Service network, and the apiserver's address in it (its first host). */
export const SERVICE_CIDR = "10.96.0.0/12";
export const API_SERVICE_IP = "10.96.0.1";
export const CLUSTER_DOMAIN = "cluster.local";

/** Kubernetes' etcd key space, outside the curator's /nodecore/: the stored PKI, and the apiserver's objects below registry/. */
export const KUBERNETES_ETCD_PREFIX = "/kubernetes/";
/** The stored PKI's key in that space. */
const PKI_NAME = "pki";
/** The one etcd key of the stored PKI, whole (as etcdctl shows it). */
export const PKI_KEY = `${KUBERNETES_ETCD_PREFIX}${PKI_NAME}`;

/**
 * Kubernetes' key space of a member's client, and nothing else of it:
 * what consensus hands the controller, and what the curator reads the PKI
 * through to certify kubelets and the owner.
 */
export interface KubernetesKeys {
  readonly space: Namespace;
}

export function kubernetesKeys(etcd: Etcd3): KubernetesKeys {
  return { space: etcd.namespace(KUBERNETES_ETCD_PREFIX) };
}
const PKI_VERSION = 1;

export class KubernetesPKIError extends Error {
  override name = "KubernetesPKIError";
}

/** A certificate and its private key. */
export interface Credential {
  certificate: X509Certificate;
  privateKey: KeyObject;
}

/** The stored part of the PKI. */
export interface KubernetesPKI {
  ca: CA;
  frontProxyCA: CA;
  /** ECDSA P-256: the apiserver signs service-account tokens with it. */
  serviceAccountKey: KeyObject;
  apiserverKubeletClient: Credential;
  controllerManager: Credential;
  scheduler: Credential;
  frontProxyClient: Credential;
  admin: Credential;
}

function newCA(commonName: string): CA {
  const key = generateKeyPair();
  const certificate = createCertificate({ commonName, organization: "nodecore", publicKey: key.publicKey, kind: "ca" }, { privateKey: key.privateKey });
  return { certificate, privateKey: key.privateKey };
}

interface Subject {
  commonName: string;
  organization?: string;
  kind: CertificateKind;
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
}

/** A fresh key and a certificate for it under `ca`. */
export function issueCredential(ca: CA, subject: Subject): Credential {
  const key = generateKeyPair();
  const certificate = createCertificate({ ...subject, publicKey: key.publicKey }, ca);
  return { certificate, privateKey: key.privateKey };
}

/** A new PKI, in memory. */
export function createKubernetesPKI(): KubernetesPKI {
  const ca = newCA(KUBERNETES_CA_COMMON_NAME);
  const frontProxyCA = newCA(FRONT_PROXY_CA_COMMON_NAME);
  return {
    ca,
    frontProxyCA,
    serviceAccountKey: generateKeyPairSync("ec", { namedCurve: "prime256v1" }).privateKey,
    apiserverKubeletClient: issueCredential(ca, { commonName: APISERVER_KUBELET_CLIENT, kind: "client" }),
    controllerManager: issueCredential(ca, { commonName: CONTROLLER_MANAGER_USER, kind: "client" }),
    scheduler: issueCredential(ca, { commonName: SCHEDULER_USER, kind: "client" }),
    frontProxyClient: issueCredential(frontProxyCA, { commonName: FRONT_PROXY_CLIENT, kind: "client" }),
    admin: issueCredential(ca, { commonName: ADMIN_USER, organization: MASTERS_GROUP, kind: "client" }),
  };
}

/** The service-account public key, PEM (the apiserver verifies tokens with it). */
export function serviceAccountPublicKeyPem(pki: KubernetesPKI): string {
  return createPublicKey(pki.serviceAccountKey).export({ format: "pem", type: "spki" }).toString();
}

/**
 * The apiserver's serving certificate on one controller node: every name a
 * client may dial it by (the service's DNS names and IP, localhost, and the
 * node's own addresses).
 */
export function issueApiserverCertificate(pki: KubernetesPKI, addresses: readonly string[]): Credential {
  return issueCredential(pki.ca, {
    commonName: "kube-apiserver",
    kind: "server",
    dnsNames: ["kubernetes", "kubernetes.default", "kubernetes.default.svc", `kubernetes.default.svc.${CLUSTER_DOMAIN}`, "localhost"],
    ipAddresses: [...new Set([API_SERVICE_IP, "127.0.0.1", ...addresses])],
  });
}

/** The serving certificate of the controller-manager or scheduler, which listen on the node's address. */
export function issueComponentServingCertificate(pki: KubernetesPKI, component: string, address: string): Credential {
  return issueCredential(pki.ca, { commonName: component, kind: "server", dnsNames: ["localhost"], ipAddresses: [...new Set(["127.0.0.1", address])] });
}

/** The owner's Kubernetes client certificate, over a key the owner keeps. */
export function issueOwnerKubernetesCertificate(pki: KubernetesPKI, publicKey: KeyObject): X509Certificate {
  return createCertificate({ commonName: OWNER_USER, publicKey, kind: "client" }, pki.ca);
}

/** The kubelet's identity to the Node authorizer. */
export function kubeletUser(nodeId: string): string {
  return `system:node:${nodeId}`;
}

/**
 * A kubelet's certificates over the node's own key: the same name serves
 * (apiserver → kubelet, verified against the Kubernetes CA) and calls
 * (kubelet → apiserver, as a member of system:nodes).
 */
/**
 * How long a kubelet's certificates are valid. Short, so that a node that
 * was deleted, or lost the worker role, loses its kubelet's identity soon
 * after (the curator issues them only to a worker); the node asks for new
 * ones at half their life (KUBELET_RENEW_FRACTION, service_kubelet.ts).
 */
export const KUBELET_CERTIFICATE_VALIDITY_MS = 2 * 3600 * 1000;

export function issueKubeletCertificates(
  pki: KubernetesPKI,
  nodeId: string,
  publicKey: KeyObject,
  addresses: readonly string[],
  validForMs: number = KUBELET_CERTIFICATE_VALIDITY_MS,
): { server: X509Certificate; client: X509Certificate; proxy: X509Certificate; dns: X509Certificate; volumes: X509Certificate; networkPolicy: X509Certificate } {
  const commonName = kubeletUser(nodeId);
  return {
    server: createCertificate({ commonName, organization: NODES_GROUP, publicKey, kind: "server", dnsNames: [nodeId], ipAddresses: addresses, validForMs }, pki.ca),
    client: createCertificate({ commonName, organization: NODES_GROUP, publicKey, kind: "client", validForMs }, pki.ca),
    // kube-proxy runs beside the kubelet, on the same key, under the name Kubernetes' default RBAC gives the node proxier.
    proxy: createCertificate({ commonName: PROXY_USER, publicKey, kind: "client", validForMs }, pki.ca),
    // CoreDNS beside them too, under a name of its own that the reconciler gives read access to what DNS answers from.
    dns: createCertificate({ commonName: DNS_USER, publicKey, kind: "client", validForMs }, pki.ca),
    // The node's volume provisioner (provisioner.ts), a name of its own per node in a group the reconciler binds.
    volumes: createCertificate({ commonName: volumesUser(nodeId), organization: VOLUMES_GROUP, publicKey, kind: "client", validForMs }, pki.ca),
    // The NetworkPolicy enforcer (network_policy.ts): one name for every node, since each reads the whole cluster's pods and policies.
    networkPolicy: createCertificate({ commonName: NETWORK_POLICY_USER, publicKey, kind: "client", validForMs }, pki.ca),
  };
}

/** A worker's volume provisioner's identity: its own name, in the group reconciler.ts binds to nodecore:volume-provisioner. */
export const VOLUMES_GROUP = "nodecore:volume-provisioners";
export function volumesUser(nodeId: string): string {
  return `nodecore:volumes:${nodeId}`;
}

/** Every worker's NetworkPolicy enforcer's identity (reconciler.ts binds it to nodecore:network-policy). */
export const NETWORK_POLICY_USER = "nodecore:network-policy";

/** The cluster DNS server's identity (reconciler.ts binds it to nodecore:cluster-dns). */
export const DNS_USER = "nodecore:cluster-dns";

/** kube-proxy's identity: bound to system:node-proxier by Kubernetes' default RBAC. */
export const PROXY_USER = "system:kube-proxy";

// --- storage -------------------------------------------------------------

interface StoredCredential {
  certificate: string;
  privateKey: string;
}

const CREDENTIALS = ["ca", "frontProxyCA", "apiserverKubeletClient", "controllerManager", "scheduler", "frontProxyClient", "admin"] as const;

export function encodeKubernetesPKI(pki: KubernetesPKI): string {
  const stored: Record<string, unknown> = { version: PKI_VERSION, serviceAccountKey: privateKeyPem(pki.serviceAccountKey) };
  for (const name of CREDENTIALS) stored[name] = { certificate: toPem(pki[name].certificate), privateKey: privateKeyPem(pki[name].privateKey) };
  return JSON.stringify(stored);
}

export function decodeKubernetesPKI(text: string): KubernetesPKI {
  let stored: Record<string, unknown>;
  try {
    stored = JSON.parse(text) as Record<string, unknown>;
  } catch (error) {
    throw new KubernetesPKIError(`the Kubernetes PKI in etcd (${PKI_KEY}) is not JSON`, { cause: error });
  }
  if (stored.version !== PKI_VERSION) throw new KubernetesPKIError(`the Kubernetes PKI in etcd (${PKI_KEY}) has version ${String(stored.version)}, expected ${PKI_VERSION}`);
  const credential = (name: string): Credential => {
    const c = stored[name] as StoredCredential | undefined;
    if (typeof c?.certificate !== "string" || typeof c.privateKey !== "string") throw new KubernetesPKIError(`the Kubernetes PKI in etcd (${PKI_KEY}) lacks ${name}`);
    return { certificate: new X509Certificate(c.certificate), privateKey: createPrivateKey(c.privateKey) };
  };
  if (typeof stored.serviceAccountKey !== "string") throw new KubernetesPKIError(`the Kubernetes PKI in etcd (${PKI_KEY}) lacks serviceAccountKey`);
  return {
    ca: credential("ca"),
    frontProxyCA: credential("frontProxyCA"),
    serviceAccountKey: createPrivateKey(stored.serviceAccountKey),
    apiserverKubeletClient: credential("apiserverKubeletClient"),
    controllerManager: credential("controllerManager"),
    scheduler: credential("scheduler"),
    frontProxyClient: credential("frontProxyClient"),
    admin: credential("admin"),
  };
}

/** The stored PKI, or undefined when nobody has created it yet. */
export async function loadKubernetesPKI(keys: KubernetesKeys): Promise<KubernetesPKI | undefined> {
  const text = await keys.space.get(PKI_NAME).string();
  return text === null ? undefined : decodeKubernetesPKI(text);
}

/**
 * The stored PKI, created now if nobody has: one transaction that writes
 * only while the key is absent, so of any number of concurrent callers
 * exactly one creates it and all get the same PKI.
 */
export async function ensureKubernetesPKI(keys: KubernetesKeys): Promise<{ pki: KubernetesPKI; created: boolean }> {
  const existing = await loadKubernetesPKI(keys);
  if (existing) return { pki: existing, created: false };
  const fresh = createKubernetesPKI();
  const result = await keys.space
    .if(PKI_NAME, "Create", "==", 0)
    .then(keys.space.put(PKI_NAME).value(encodeKubernetesPKI(fresh)))
    .commit();
  if (result.succeeded) return { pki: fresh, created: true };
  const winner = await loadKubernetesPKI(keys);
  if (!winner) throw new KubernetesPKIError(`the Kubernetes PKI in etcd (${PKI_KEY}) was created and then removed while it was being read`);
  return { pki: winner, created: false };
}
