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
// minutes against clock skew. Node IDs are a pure function of the node key.

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
  DEFAULT_VALIDITY_MS,
  type CertificateKind,
  type CertificateTemplate,
  type KeyPair,
  type Signer,
} from "./certificate.ts";
export {
  createClusterCA,
  issueNodeCertificate,
  issueOwnerCertificate,
  selfSignedCertificate,
  nodeIdFromPublicKey,
  organizationOf,
  commonNameOf,
  CA_COMMON_NAME,
  NODE_ORGANIZATION,
  OWNER_ORGANIZATION,
  OWNER_COMMON_NAME,
  SELF_SIGNED_ORGANIZATION,
  type CA,
} from "./identity.ts";
