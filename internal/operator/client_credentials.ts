// A client credential for a tool beside ctl (etcdctl, kubectl, Prometheus):
// a key made here, on the owner's machine, certified by the cluster over
// its public half, and written as files only the owner reads. The private
// key never leaves this machine and never reaches the cluster.

import { X509Certificate } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { APISERVER_PORT, buildKubeconfig, OWNER_USER } from "../kubernetes/mod.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey, type KeyPair } from "../pki/mod.ts";
import { OperatorError, writeOwnerOnly, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import { listNodes, type CallSettings } from "./nodes.ts";

/** The files `ctl etcd credentials` writes into its directory, for etcdctl's --cacert, --cert and --key. */
export const ETCD_CLIENT_FILES = { ca: "ca.pem", certificate: "client.pem", key: "client.key" } as const;

export interface CertifiedKey<R> {
  key: KeyPair;
  ca: X509Certificate;
  certificate: X509Certificate;
  /** The whole answer (the apiservers of a Kubernetes credential, ...). */
  response: R;
}

/** Makes a key and has `issue` certify its public half. */
export async function certifyNewKey<R extends { caCertificate: Uint8Array; clientCertificate: Uint8Array }>(issue: (publicKey: Uint8Array) => Promise<R>): Promise<CertifiedKey<R>> {
  const key = generateKeyPair();
  const response = await issue(rawPublicKey(key.publicKey));
  return { key, ca: new X509Certificate(response.caCertificate), certificate: new X509Certificate(response.clientCertificate), response };
}

/** Writes the CA, the certificate and the key (0600) as PEM files named `names` in `dir` (made 0700); returns their absolute paths. */
export function writePemFiles(dir: string, names: { ca: string; certificate: string; key: string }, credential: CertifiedKey<unknown>): { ca: string; certificate: string; key: string } {
  const absolute = resolve(dir);
  mkdirSync(absolute, { recursive: true, mode: 0o700 });
  const files = { ca: join(absolute, names.ca), certificate: join(absolute, names.certificate), key: join(absolute, names.key) };
  writeFileSync(files.ca, credential.ca.toString());
  writeFileSync(files.certificate, credential.certificate.toString());
  writeFileSync(files.key, privateKeyPem(credential.key.privateKey), { mode: 0o600 });
  return files;
}

/** Makes an etcd client key, has the cluster certify it, and writes the three files into `dir`; returns an etcdctl command that uses them. */
export async function writeEtcdCredentials(credentials: OwnerCredentials, settings: CallSettings, dir: string): Promise<{ dir: string; example: string }> {
  const client = await certifyNewKey((publicKey) => withFailover(Management, credentials, (m) => m.getEtcdCredentials({ publicKey }, settings), settings.progress));
  writePemFiles(dir, ETCD_CLIENT_FILES, client);
  const [ca, certificate, key] = [ETCD_CLIENT_FILES.ca, ETCD_CLIENT_FILES.certificate, ETCD_CLIENT_FILES.key].map((name) => join(dir, name));
  return { dir, example: `etcdctl --cacert ${ca} --cert ${certificate} --key ${key} --endpoints https://<node address>:2379 member list` };
}

/** What `ctl kubeconfig` wrote, and a warning when no controller serves the API yet. */
export interface OwnerKubeconfig {
  file: string;
  /** The apiserver the kubeconfig names: the first the cluster lists. */
  server: string;
  apiservers: string[];
  user: string;
  warning?: string;
}

/**
 * Makes a Kubernetes client key for the owner (user nodecore:owner), has
 * the cluster certify it, and writes a kubeconfig with it into `file`
 * (0600). The controllers the cluster names may not serve yet (an apiserver
 * starting, or failing): the warning says so, from their own status lines.
 */
export async function writeOwnerKubeconfig(credentials: OwnerCredentials, settings: CallSettings, file: string): Promise<OwnerKubeconfig> {
  const client = await certifyNewKey((publicKey) => withFailover(Management, credentials, (m) => m.getKubernetesCredentials({ publicKey }, settings), settings.progress));
  const { apiservers } = client.response;
  const server = apiservers[0];
  if (!server) throw new OperatorError("no apiserver to point the kubeconfig at: no UP node holds both the kubernetes-controller and the consensus role");
  const text = buildKubeconfig({ server, ca: client.ca, certificate: client.certificate, privateKey: client.key.privateKey, user: OWNER_USER });
  writeOwnerOnly(file, text);
  const written: OwnerKubeconfig = { file, server, apiservers, user: OWNER_USER };
  const nodes = await listNodes(credentials, settings).catch(() => undefined);
  if (!nodes) return written;
  const controllers = nodes.filter((n) => apiservers.includes(`https://${n.address}:${APISERVER_PORT}`));
  if (controllers.some((n) => n.services.some((l) => l.name === "kube-apiserver" && l.state === "running"))) return written;
  const states = controllers.map((n) => `${n.id}: ${n.services.find((l) => l.name === "kube-apiserver")?.state ?? "no kube-apiserver line"}`).join("; ");
  return { ...written, warning: `no controller's kube-apiserver is running yet (${states || "none reported"}); kubectl fails until one is` };
}
