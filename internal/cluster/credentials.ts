// The node's credentials: its key, its certificate under the cluster CA, and
// the CA. Kept on the (encrypted) data partition.

import { X509Certificate, type KeyObject } from "node:crypto";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { writeFileDurably, type StorageLayout } from "../localstorage/mod.ts";
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
  // The private key last: its presence says the credentials are there.
  writeFileDurably(files.certificate, credentials.certificate.raw, { mode: 0o644 });
  writeFileDurably(files.caCertificate, credentials.ca.raw, { mode: 0o644 });
  writeFileDurably(files.privateKey, rawPrivateKey(credentials.privateKey), { mode: 0o600 });
}

/** Reads and parses one saved file; an error names the file and what is wrong with it. */
function readSaved<T>(file: string, what: string, parse: (bytes: Buffer) => T): T {
  const bytes = readFileSync(file);
  if (bytes.length === 0) throw new CredentialsError(`${what} ${file} is empty (written just before a power cut by an older version?)`);
  try {
    return parse(bytes);
  } catch (err) {
    throw new CredentialsError(`${what} ${file} is corrupt: ${(err as Error).message}`, { cause: err });
  }
}

/** The saved credentials, or undefined if this node has none yet. */
export function loadCredentials(layout: StorageLayout): NodeCredentials | undefined {
  const files = layout.data.node;
  if (!existsSync(files.privateKey)) return undefined;
  for (const file of [files.certificate, files.caCertificate]) {
    if (!existsSync(file)) throw new CredentialsError(`node credentials are incomplete: ${file} is missing`);
  }
  const privateKey = readSaved(files.privateKey, "node private key", (b) => privateKeyFromRaw(b));
  const publicKey = createPublicKey(privateKey);
  const certificate = readSaved(files.certificate, "node certificate", (b) => new X509Certificate(b));
  const ca = readSaved(files.caCertificate, "cluster CA certificate", (b) => new X509Certificate(b));
  const problem = verifyIssuedBy(certificate, ca);
  if (problem) throw new CredentialsError(`saved node certificate is unusable: ${problem}`);
  return { nodeId: nodeIdFromPublicKey(rawPublicKey(publicKey)), privateKey, publicKey, certificate, ca };
}
