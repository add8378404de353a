// The node's credentials: its key, its certificate under the cluster CA, and
// the CA. Kept on the (encrypted) data partition.

import { X509Certificate, type KeyObject } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import type { StorageLayout } from "../localstorage/mod.ts";
import { createPublicKey } from "node:crypto";
import { nodeIdFromPublicKey, privateKeyFromRaw, rawPrivateKey, rawPublicKey, verifyIssuedBy } from "../pki/mod.ts";

export interface NodeCredentials {
  nodeId: string;
  privateKey: KeyObject;
  publicKey: KeyObject;
  certificate: X509Certificate;
  ca: X509Certificate;
}

export class CredentialsError extends Error {
  override name = "CredentialsError";
}

export function saveCredentials(layout: StorageLayout, credentials: NodeCredentials): void {
  const files = layout.data.node;
  mkdirSync(dirname(files.privateKey), { recursive: true, mode: 0o700 });
  writeFileSync(files.privateKey, rawPrivateKey(credentials.privateKey), { mode: 0o600 });
  writeFileSync(files.certificate, credentials.certificate.raw);
  writeFileSync(files.caCertificate, credentials.ca.raw);
}

/** The saved credentials, or undefined if this node has none yet. */
export function loadCredentials(layout: StorageLayout): NodeCredentials | undefined {
  const files = layout.data.node;
  if (!existsSync(files.privateKey)) return undefined;
  for (const file of [files.certificate, files.caCertificate]) {
    if (!existsSync(file)) throw new CredentialsError(`node credentials are incomplete: ${file} is missing`);
  }
  const privateKey = privateKeyFromRaw(readFileSync(files.privateKey));
  const publicKey = createPublicKey(privateKey);
  const certificate = new X509Certificate(readFileSync(files.certificate));
  const ca = new X509Certificate(readFileSync(files.caCertificate));
  const problem = verifyIssuedBy(certificate, ca);
  if (problem) throw new CredentialsError(`saved node certificate is unusable: ${problem}`);
  return { nodeId: nodeIdFromPublicKey(rawPublicKey(publicKey)), privateKey, publicKey, certificate, ca };
}
