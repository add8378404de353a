// The owner's credentials on disk: the owner key, the owner certificate, the
// cluster CA, and the curator endpoints last known.
//
//   <config dir>/owner.key    Ed25519 private key (PEM, PKCS#8), mode 0600
//   <config dir>/owner.crt    owner certificate under the cluster CA (PEM)
//   <config dir>/ca.crt       cluster CA certificate (PEM)
//   <config dir>/endpoints    one curator per line: "node-…@host:port" (or "host:port")

import { X509Certificate, createPrivateKey, createPublicKey, type KeyObject } from "node:crypto";
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { EndpointError, formatEndpoint, parseEndpoint, type CuratorEndpoint } from "../curator/client/mod.ts";
import { generateKeyPair, privateKeyPem, type KeyPair } from "../pki/mod.ts";

export const CONFIG_DIR_ENV = "NODECORE_CONFIG";

export class OperatorError extends Error {
  override name = "OperatorError";
}

export function defaultConfigDir(): string {
  return process.env[CONFIG_DIR_ENV] ?? join(homedir(), ".config", "nodecore");
}

export function configPaths(dir: string) {
  return {
    dir,
    ownerKey: join(dir, "owner.key"),
    ownerCertificate: join(dir, "owner.crt"),
    ca: join(dir, "ca.crt"),
    endpoints: join(dir, "endpoints"),
  };
}

export type ConfigPaths = ReturnType<typeof configPaths>;

/** Reads the owner key; a clear error if it is missing, not PEM, or not an Ed25519 key. */
export function readOwnerKey(path: string): KeyPair {
  if (!existsSync(path)) throw new OperatorError(`no owner key at ${path}: pass --owner-key with the key the cluster was bootstrapped with`);
  const pem = readConfigFile(path);
  let privateKey: KeyObject;
  try {
    if (!pem.includes("-----BEGIN ")) throw new Error("no PEM header");
    privateKey = createPrivateKey(pem);
  } catch {
    throw new OperatorError(`owner key ${path} is not a valid PEM private key`);
  }
  if (privateKey.asymmetricKeyType !== "ed25519") throw new OperatorError(`owner key ${path} is ${privateKey.asymmetricKeyType}, not ed25519`);
  return { privateKey, publicKey: createPublicKey(privateKey) };
}

/** A certificate file of the config dir; an error naming the file if it is not one. */
function readCertificate(path: string, what: string): X509Certificate {
  const pem = readConfigFile(path);
  try {
    if (!pem.includes("-----BEGIN CERTIFICATE-----")) throw new Error("no PEM header");
    return new X509Certificate(pem);
  } catch {
    throw new OperatorError(`${what} ${path} is not a valid PEM certificate: run 'ctl takeownership <node address>' again to rewrite it`);
  }
}

/** The cluster CA pinned in the config directory (ca.crt, written by takeownership), if there is one. */
export function readPinnedCA(paths: ConfigPaths): X509Certificate | undefined {
  return existsSync(paths.ca) ? readCertificate(paths.ca, "cluster CA certificate") : undefined;
}

/** A CA certificate the owner names (--ca): an error naming the file if it is not one. */
export function readCACertificate(path: string): X509Certificate {
  if (!existsSync(path)) throw new OperatorError(`no CA certificate at ${path}`);
  return readCertificate(path, "CA certificate");
}

/** A file's text; an error that names the file and why it cannot be read (permissions, a directory). */
function readConfigFile(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    throw new OperatorError(`cannot read ${path}: ${code === "EACCES" ? "permission denied" : code === "EISDIR" ? "it is a directory" : (err as Error).message}`);
  }
}

/** Whether `certificate` certifies `key`'s public key. */
function certifies(certificate: X509Certificate, key: KeyPair): boolean {
  const der = (k: KeyObject) => k.export({ format: "der", type: "spki" });
  return der(certificate.publicKey).equals(der(key.publicKey));
}

/** Creates a new owner key at `path`, refusing to overwrite one. */
export function generateOwnerKey(path: string): KeyPair {
  if (existsSync(path)) throw new OperatorError(`an owner key already exists at ${path}; refusing to overwrite it`);
  const key = generateKeyPair();
  mkdirSync(join(path, ".."), { recursive: true, mode: 0o700 });
  writeFileSync(path, privateKeyPem(key.privateKey), { mode: 0o600 });
  return key;
}

export interface OwnerCredentials {
  key: KeyPair;
  certificate: X509Certificate;
  ca: X509Certificate;
  endpoints: CuratorEndpoint[];
  /** Where they were read from, for errors that name the files. */
  files?: ConfigPaths;
}

export function saveCredentials(paths: ConfigPaths, credentials: { certificate: X509Certificate; ca: X509Certificate; endpoints: CuratorEndpoint[] }): void {
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  writeFileSync(paths.ownerCertificate, credentials.certificate.toString());
  writeFileSync(paths.ca, credentials.ca.toString());
  writeFileSync(paths.endpoints, credentials.endpoints.map(formatEndpoint).join("\n") + "\n");
}

/**
 * Everything needed to call the cluster as its owner, or an error that
 * names the file at fault and says what to run: files missing, not PEM, an
 * owner key that is not the one owner.crt certifies, an owner.crt not
 * signed by ca.crt (files of two different takeovers).
 */
export function loadCredentials(paths: ConfigPaths, ownerKeyPath = paths.ownerKey): OwnerCredentials {
  for (const file of [paths.ownerCertificate, paths.ca, paths.endpoints]) {
    if (!existsSync(file)) throw new OperatorError(`no cluster credentials in ${paths.dir} (missing ${file}): run 'ctl takeownership <node address>' first`);
  }
  const lines = readConfigFile(paths.endpoints)
    .split("\n")
    .map((l) => l.trim())
    .filter(Boolean);
  if (lines.length === 0) throw new OperatorError(`${paths.endpoints} lists no curator endpoints`);
  const endpoints = lines.map((line, i) => {
    try {
      return parseEndpoint(line);
    } catch (err) {
      if (err instanceof EndpointError) throw new OperatorError(`${paths.endpoints}, line ${i + 1}: ${err.message}`);
      throw err;
    }
  });
  const key = readOwnerKey(ownerKeyPath);
  const certificate = readCertificate(paths.ownerCertificate, "owner certificate");
  const ca = readCertificate(paths.ca, "cluster CA certificate");
  if (!certifies(certificate, key)) {
    throw new OperatorError(
      `owner key ${ownerKeyPath} does not match owner certificate ${paths.ownerCertificate}: pass --owner-key with the key that took ownership, or run 'ctl takeownership <node address>' with this one`,
    );
  }
  if (!certificate.checkIssued(ca) || !certificate.verify(ca.publicKey)) {
    throw new OperatorError(`owner certificate ${paths.ownerCertificate} is not signed by the CA in ${paths.ca} (files of two different takeovers): run 'ctl takeownership <node address>' again`);
  }
  return { key, certificate, ca, endpoints, files: paths };
}

/**
 * Writes a file only its owner may read (node parameters, a kubeconfig):
 * the mode is set again, for a file that existed with a wider one (the
 * mode given to writeFileSync applies only to a file it creates).
 */
export function writeOwnerOnly(file: string, data: string | Uint8Array): void {
  writeFileSync(file, data, { mode: 0o600 });
  chmodSync(file, 0o600);
}
