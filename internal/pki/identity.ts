// Who is who in the cluster, as told by certificates under the cluster CA.
//
//   cluster CA   CN="nodecore cluster CA"  O="nodecore"          (self-signed, path length 0)
//   ├─ node      CN=<node id>              O="nodecore node"     (server+client, SAN: node id, IPs)
//   ├─ curator   CN=<node id>              O="nodecore curator"  (server, SAN: node id + its address; short-lived)
//   ├─ owner     CN="owner"                O="nodecore owner"    (client)
//   └─ join      CN=<node id>              O="nodecore join"     (server+client; the node's join key)
//
// A node's ID is derived from its public key, so nobody can claim another
// node's ID without its private key. Only a curator certificate makes a
// server a curator: a node certificate says "this is node X", never "this
// is the cluster's control service". Curators mint theirs from the CA in
// etcd, and only while the cluster's records make them consensus members
// (internal/curator, identity.ts); every client checks for one.

import { createHash, type KeyObject, type X509Certificate } from "node:crypto";
import { createCertificate, rawPublicKey, verifyIssuedBy, type KeyPair } from "./certificate.ts";

export const CA_COMMON_NAME = "nodecore cluster CA";
export const CA_ORGANIZATION = "nodecore";
export const NODE_ORGANIZATION = "nodecore node";
export const OWNER_ORGANIZATION = "nodecore owner";
export const CURATOR_ORGANIZATION = "nodecore curator";
/**
 * A join certificate: "this join key is node X", for the time before X's
 * data (and so its node key) is unlocked. It is neither a node nor an owner
 * certificate, so it opens no cluster API; only the cold-start share
 * holders (internal/coldstart) accept it.
 */
export const JOIN_ORGANIZATION = "nodecore join";
export const OWNER_COMMON_NAME = "owner";
/**
 * A metrics reader certificate: "may read metrics", nothing else. The
 * owner has ctl issue one for Prometheus, so that the scraper holds no key
 * that opens the cluster's API (internal/metrics).
 */
export const METRICS_READER_ORGANIZATION = "nodecore metrics reader";
/** How long a metrics reader certificate lasts: there is no revoking one, so it ends by itself. */
export const METRICS_READER_VALIDITY_MS = 365 * 24 * 3600 * 1000;
/** Self-signed certificates carry this organization; they prove key possession only. */
export const SELF_SIGNED_ORGANIZATION = "nodecore self-signed";

const NODE_ID_PREFIX = "node-";
const NODE_ID_HEX_CHARS = 16;
/** What a node ID looks like: nodeIdFromPublicKey's output. Every layer that checks one uses this. */
export const NODE_ID_PATTERN = new RegExp(`^${NODE_ID_PREFIX}[0-9a-f]{${NODE_ID_HEX_CHARS}}$`);

/** The node ID for a node public key: `node-` and 16 hex digits of its hash. */
export function nodeIdFromPublicKey(publicKey: Uint8Array): string {
  return NODE_ID_PREFIX + createHash("sha256").update(publicKey).digest("hex").slice(0, NODE_ID_HEX_CHARS);
}

export function createClusterCA(key: KeyPair): X509Certificate {
  return createCertificate({ commonName: CA_COMMON_NAME, organization: CA_ORGANIZATION, publicKey: key.publicKey, kind: "ca" }, { privateKey: key.privateKey });
}

export interface CA {
  certificate: X509Certificate;
  privateKey: KeyObject;
}

/** A node's certificate: the node's identity when it calls the cluster APIs (and serves its own). */
export function issueNodeCertificate(ca: CA, publicKey: KeyObject, options: { ipAddresses?: readonly string[] } = {}): X509Certificate {
  const nodeId = nodeIdFromPublicKey(rawPublicKey(publicKey));
  return createCertificate(
    {
      commonName: nodeId,
      organization: NODE_ORGANIZATION,
      publicKey,
      kind: "peer",
      dnsNames: [nodeId],
      ipAddresses: options.ipAddresses ?? [],
    },
    ca,
  );
}

/**
 * A curator's serving certificate: "node X serves the cluster's control
 * service at this address". Short-lived; the curator renews it while the
 * cluster's records keep it a consensus member.
 */
export function issueCuratorCertificate(ca: CA, publicKey: KeyObject, options: { address: string; validForMs: number }): X509Certificate {
  const nodeId = nodeIdFromPublicKey(rawPublicKey(publicKey));
  return createCertificate(
    {
      commonName: nodeId,
      organization: CURATOR_ORGANIZATION,
      publicKey,
      kind: "server",
      dnsNames: [nodeId],
      ipAddresses: [options.address],
      validForMs: options.validForMs,
    },
    ca,
  );
}

/** Node `nodeId`'s join certificate, for its join public key. The curator issues it from the node's record. */
export function issueJoinCertificate(ca: CA, joinPublicKey: KeyObject, nodeId: string): X509Certificate {
  return createCertificate({ commonName: nodeId, organization: JOIN_ORGANIZATION, publicKey: joinPublicKey, kind: "peer", dnsNames: [nodeId] }, ca);
}

/** Why `certificate` is not node `nodeId`'s join certificate under `ca`, or undefined if it is. */
export function joinCertificateProblem(certificate: X509Certificate, ca: X509Certificate, nodeId: string): string | undefined {
  const chain = verifyIssuedBy(certificate, ca);
  if (chain) return chain;
  const name = commonNameOf(certificate);
  if (organizationOf(certificate) !== JOIN_ORGANIZATION) return `the certificate of '${name}' is not a join certificate`;
  if (certificate.publicKey.asymmetricKeyType !== "ed25519") return "the join certificate's key is not ed25519";
  if (name !== nodeId) return `expected node ${nodeId}'s join certificate, but it names ${name}`;
  return undefined;
}

/** The IP addresses a certificate names, in canonical text form (IPv6 compressed, lower case). */
export function ipAddressesOf(certificate: X509Certificate): string[] {
  return (certificate.subjectAltName ?? "")
    .split(", ")
    .filter((entry) => entry.startsWith("IP Address:"))
    .map((entry) => canonicalIp(entry.slice("IP Address:".length)));
}

/** An IP address in one canonical text form, so that "FD00:0:0:0:0:0:0:1" and "fd00::1" compare equal. */
export function canonicalIp(address: string): string {
  if (!address.includes(":")) return address;
  try {
    return new URL(`http://[${address}]/`).hostname.slice(1, -1);
  } catch {
    return address.toLowerCase();
  }
}

export function issueOwnerCertificate(ca: CA, publicKey: KeyObject): X509Certificate {
  return createCertificate({ commonName: OWNER_COMMON_NAME, organization: OWNER_ORGANIZATION, publicKey, kind: "client" }, ca);
}

export function issueMetricsReaderCertificate(ca: CA, publicKey: KeyObject, name: string): X509Certificate {
  return createCertificate({ commonName: name, organization: METRICS_READER_ORGANIZATION, publicKey, kind: "client", validForMs: METRICS_READER_VALIDITY_MS }, ca);
}

/** A self-signed certificate for a key, to prove possession of it in a TLS handshake. */
export function selfSignedCertificate(key: KeyPair): X509Certificate {
  return createCertificate({ commonName: "self-signed", organization: SELF_SIGNED_ORGANIZATION, publicKey: key.publicKey, kind: "client" }, { privateKey: key.privateKey });
}

/**
 * Whether a certificate's name is the node ID of its own key: an Ed25519
 * key and CN = nodeIdFromPublicKey(key). Node and curator certificates must
 * pass this; it is what makes "node X" unforgeable without X's key.
 */
export function namesItsOwnKey(certificate: X509Certificate): boolean {
  return certificate.publicKey.asymmetricKeyType === "ed25519" && nodeIdFromPublicKey(rawPublicKey(certificate.publicKey)) === commonNameOf(certificate);
}

/**
 * Why `certificate` (chained to the cluster CA by TLS) is not node `nodeId`'s
 * node certificate, or undefined if it is: a client checks with it that the
 * node it dialled at an address is the node it meant.
 */
export function nodeIdentityProblem(certificate: X509Certificate, nodeId: string): string | undefined {
  const name = commonNameOf(certificate);
  if (organizationOf(certificate) !== NODE_ORGANIZATION) return `the server presented a certificate of '${name}', not a node certificate`;
  if (!namesItsOwnKey(certificate)) {
    return `the node certificate names ${name}, which does not match its key`;
  }
  if (name !== nodeId) return `expected node ${nodeId}, but ${name} answered`;
  return undefined;
}

/** The O field of a certificate's subject. */
export function organizationOf(certificate: X509Certificate): string | undefined {
  return fieldOf(certificate.subject, "O");
}

export function commonNameOf(certificate: X509Certificate): string | undefined {
  return fieldOf(certificate.subject, "CN");
}

function fieldOf(subject: string, field: string): string | undefined {
  for (const line of subject.split("\n")) {
    if (line.startsWith(`${field}=`)) return line.slice(field.length + 1);
  }
  return undefined;
}
