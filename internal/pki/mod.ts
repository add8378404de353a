// Package pki: keys, certificates and identities of the cluster.
//
// Everything is Ed25519. Certificates are written by a small DER encoder
// (der.ts) and parsed by node:crypto's X509Certificate:
//
//   KeyPair ──▶ createCertificate(template, signer) ──▶ X509Certificate
//                         │                                  │
//                  der.ts (TBSCertificate,            verifyIssuedBy(cert, ca)
//                  extensions, signature)             nodeIdFromPublicKey(...)
//
// identity.ts fixes the naming conventions: the cluster CA, node
// certificates (CN = node ID), the owner certificate (CN = owner), and
// self-signed certificates used only to prove possession of a key.
//
// Invariants: every certificate issued here has a random 127-bit serial,
// basicConstraints and keyUsage marked critical, and is backdated a few
// minutes against clock skew; CAs have path length 0. Node IDs are a pure
// function of the node key. Public keys that arrive from outside are
// checked to be canonical Ed25519 points (ed25519_point.ts) before use.

export {
  createCertificate,
  generateKeyPair,
  rawPublicKey,
  publicKeyFromRaw,
  rawPrivateKey,
  privateKeyFromRaw,
  privateKeyPem,
  toPem,
  verifyIssuedBy,
  CertificateError,
  BACKDATE_MS,
  DEFAULT_VALIDITY_MS,
  type CertificateKind,
  type CertificateTemplate,
  type KeyPair,
  type Signer,
} from "./certificate.ts";
export {
  createClusterCA,
  issueNodeCertificate,
  issueCuratorCertificate,
  issueOwnerCertificate,
  issueJoinCertificate,
  issueMetricsReaderCertificate,
  joinCertificateProblem,
  ipAddressesOf,
  canonicalIp,
  selfSignedCertificate,
  nodeIdFromPublicKey,
  organizationOf,
  commonNameOf,
  namesItsOwnKey,
  nodeIdentityProblem,
  CA_COMMON_NAME,
  NODE_ORGANIZATION,
  CURATOR_ORGANIZATION,
  OWNER_ORGANIZATION,
  OWNER_COMMON_NAME,
  SELF_SIGNED_ORGANIZATION,
  JOIN_ORGANIZATION,
  METRICS_READER_ORGANIZATION,
  METRICS_READER_VALIDITY_MS,
  NODE_ID_PATTERN,
  type CA,
} from "./identity.ts";
export { isCanonicalEd25519PublicKey } from "./ed25519_point.ts";
