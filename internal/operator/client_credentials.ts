// A client credential for a tool beside ctl (etcdctl, kubectl, Prometheus):
// a key made here, on the owner's machine, certified by the cluster over
// its public half, and written as files only the owner reads. The private
// key never leaves this machine and never reaches the cluster.

import { X509Certificate } from "node:crypto";
import { mkdirSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { generateKeyPair, privateKeyPem, rawPublicKey, type KeyPair } from "../pki/mod.ts";

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
