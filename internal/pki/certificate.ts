// X.509 certificates with Ed25519 keys, written with the DER writer in
// der.ts and signed with node:crypto. Every certificate in the cluster is one
// of these: the cluster CA, node certificates (server and client), the
// owner's certificate (client), etcd peer and client certificates.

import { X509Certificate, createHash, createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes, sign, type KeyObject } from "node:crypto";
import { isIPv4, isIPv6 } from "node:net";
import * as der from "./der.ts";

const OID = {
  ed25519: "1.3.101.112",
  commonName: "2.5.4.3",
  organization: "2.5.4.10",
  subjectKeyIdentifier: "2.5.29.14",
  keyUsage: "2.5.29.15",
  subjectAltName: "2.5.29.17",
  basicConstraints: "2.5.29.19",
  authorityKeyIdentifier: "2.5.29.35",
  extKeyUsage: "2.5.29.37",
  serverAuth: "1.3.6.1.5.5.7.3.1",
  clientAuth: "1.3.6.1.5.5.7.3.2",
} as const;

/** How long a certificate is valid unless the template says otherwise. */
export const DEFAULT_VALIDITY_MS = 10 * 365 * 24 * 3600 * 1000;
/** Certificates start being valid this long before issuance, against clock skew. */
export const BACKDATE_MS = 5 * 60 * 1000;

/** What a certificate may be used for. */
export type CertificateKind = "ca" | "server" | "client" | "peer";

export interface CertificateTemplate {
  commonName: string;
  organization?: string;
  publicKey: KeyObject;
  kind: CertificateKind;
  dnsNames?: readonly string[];
  ipAddresses?: readonly string[];
  notBefore?: Date;
  validForMs?: number;
}

/** Who signs: a CA certificate and its key, or just a key for a self-signed certificate. */
export interface Signer {
  privateKey: KeyObject;
  certificate?: X509Certificate;
}

export class CertificateError extends Error {
  override name = "CertificateError";
}

export interface KeyPair {
  publicKey: KeyObject;
  privateKey: KeyObject;
}

export function generateKeyPair(): KeyPair {
  return generateKeyPairSync("ed25519");
}

/** The 32 raw bytes of an Ed25519 public key. */
export function rawPublicKey(key: KeyObject): Uint8Array {
  const spki = key.export({ format: "der", type: "spki" });
  return new Uint8Array(spki.subarray(spki.length - 32));
}

const ED25519_SPKI_PREFIX = Buffer.from("302a300506032b6570032100", "hex");
const ED25519_PKCS8_PREFIX = Buffer.from("302e020100300506032b657004220420", "hex");

export function publicKeyFromRaw(raw: Uint8Array): KeyObject {
  if (raw.length !== 32) throw new CertificateError(`ed25519 public key must be 32 bytes, got ${raw.length}`);
  return createPublicKey({ key: Buffer.concat([ED25519_SPKI_PREFIX, raw]), format: "der", type: "spki" });
}

/** The 32-byte seed of an Ed25519 private key. */
export function rawPrivateKey(key: KeyObject): Uint8Array {
  const pkcs8 = key.export({ format: "der", type: "pkcs8" });
  return new Uint8Array(pkcs8.subarray(pkcs8.length - 32));
}

export function privateKeyFromRaw(seed: Uint8Array): KeyObject {
  if (seed.length !== 32) throw new CertificateError(`ed25519 private key seed must be 32 bytes, got ${seed.length}`);
  return createPrivateKey({ key: Buffer.concat([ED25519_PKCS8_PREFIX, seed]), format: "der", type: "pkcs8" });
}

function name(commonName: string, organization?: string): der.Der {
  const rdns = [];
  if (organization) rdns.push(der.set(der.sequence(der.objectIdentifier(OID.organization), der.utf8String(organization))));
  rdns.push(der.set(der.sequence(der.objectIdentifier(OID.commonName), der.utf8String(commonName))));
  return der.sequence(...rdns);
}

function ipBytes(address: string): Uint8Array {
  if (isIPv4(address)) return Uint8Array.from(address.split(".").map(Number));
  if (!isIPv6(address)) throw new CertificateError(`not an IP address: ${address}`);
  const [head = "", tail = ""] = address.split("::");
  const groups = (s: string) => (s ? s.split(":").map((g) => parseInt(g, 16)) : []);
  const h = groups(head);
  const t = address.includes("::") ? groups(tail) : [];
  const all = [...h, ...new Array(8 - h.length - t.length).fill(0), ...t];
  return Uint8Array.from(all.flatMap((g) => [g >> 8, g & 0xff]));
}

function keyIdentifier(publicKey: KeyObject): Uint8Array {
  return new Uint8Array(createHash("sha1").update(rawPublicKey(publicKey)).digest());
}

function extension(oid: string, critical: boolean, value: der.Der): der.Der {
  const parts = [der.objectIdentifier(oid)];
  if (critical) parts.push(der.boolean(true));
  parts.push(der.octetString(value));
  return der.sequence(...parts);
}

function extensions(template: CertificateTemplate, issuerKey: KeyObject): der.Der {
  const isCA = template.kind === "ca";
  const list = [
    // CAs issue end-entity certificates only (path length 0): a certificate
    // a CA issued can never itself sign another that chains to the CA.
    extension(OID.basicConstraints, true, isCA ? der.sequence(der.boolean(true), der.integer(0)) : der.sequence()),
    // digitalSignature(0); CAs also keyCertSign(5) and cRLSign(6).
    extension(OID.keyUsage, true, der.namedBits(isCA ? [0, 5, 6] : [0])),
    extension(OID.subjectKeyIdentifier, false, der.octetString(keyIdentifier(template.publicKey))),
    extension(OID.authorityKeyIdentifier, false, der.sequence(der.implicitPrimitive(0, keyIdentifier(issuerKey)))),
  ];
  const usages: Record<CertificateKind, string[]> = {
    ca: [],
    server: [OID.serverAuth],
    client: [OID.clientAuth],
    peer: [OID.serverAuth, OID.clientAuth],
  };
  if (usages[template.kind].length) {
    list.push(extension(OID.extKeyUsage, false, der.sequence(...usages[template.kind].map(der.objectIdentifier))));
  }
  const names = [...(template.dnsNames ?? []).map((n) => der.implicitPrimitive(2, new TextEncoder().encode(n))), ...(template.ipAddresses ?? []).map((a) => der.implicitPrimitive(7, ipBytes(a)))];
  if (names.length) list.push(extension(OID.subjectAltName, false, der.sequence(...names)));
  return der.explicit(3, der.sequence(...list));
}

/**
 * Issues a certificate for the template, signed by the signer (self-signed
 * when the signer carries no certificate). Returns the certificate.
 */
export function createCertificate(template: CertificateTemplate, signer: Signer): X509Certificate {
  if (signer.privateKey.asymmetricKeyType !== "ed25519") {
    throw new CertificateError(`signer key must be ed25519, got ${signer.privateKey.asymmetricKeyType}`);
  }
  const issuerPublicKey = signer.certificate?.publicKey ?? createPublicKey(signer.privateKey);
  const issuerName = signer.certificate ? issuerNameDer(signer.certificate) : name(template.commonName, template.organization);
  const notBefore = template.notBefore ?? new Date(Date.now() - BACKDATE_MS);
  const notAfter = new Date(notBefore.getTime() + (template.validForMs ?? DEFAULT_VALIDITY_MS));
  const serial = randomBytes(16);
  serial[0]! &= 0x7f;
  const algorithm = der.sequence(der.objectIdentifier(OID.ed25519));
  const tbs = der.sequence(
    der.explicit(0, der.integer(2)),
    der.integer(serial),
    algorithm,
    issuerName,
    der.sequence(der.time(notBefore), der.time(notAfter)),
    name(template.commonName, template.organization),
    new Uint8Array(template.publicKey.export({ format: "der", type: "spki" })),
    extensions(template, issuerPublicKey),
  );
  const signature = sign(null, tbs, signer.privateKey);
  return new X509Certificate(Buffer.from(der.sequence(tbs, algorithm, der.bitString(signature))));
}

/**
 * The subject Name of an issuer certificate, as DER. Certificates issued
 * here always carry an optional O and a CN, so the Name is rebuilt from them;
 * foreign CAs are never issuers.
 */
function issuerNameDer(certificate: X509Certificate): der.Der {
  const fields = new Map<string, string>();
  for (const line of certificate.subject.split("\n")) {
    const eq = line.indexOf("=");
    if (eq > 0) fields.set(line.slice(0, eq), line.slice(eq + 1));
  }
  const cn = fields.get("CN");
  if (cn === undefined) throw new CertificateError(`issuer certificate has no common name: ${certificate.subject}`);
  return name(cn, fields.get("O"));
}

export function toPem(certificate: X509Certificate): string {
  return certificate.toString();
}

export function privateKeyPem(key: KeyObject): string {
  return key.export({ format: "pem", type: "pkcs8" }).toString();
}

/**
 * Verifies that `certificate` was issued by `ca` and is valid now. Returns a
 * reason string when it is not, undefined when it is.
 */
export function verifyIssuedBy(certificate: X509Certificate, ca: X509Certificate, now = new Date()): string | undefined {
  if (!certificate.checkIssued(ca) || !certificate.verify(ca.publicKey)) return "certificate is not signed by the cluster CA";
  if (now < new Date(certificate.validFrom)) return "certificate is not yet valid";
  if (now > new Date(certificate.validTo)) return "certificate has expired";
  return undefined;
}
