// Identities for tests: a cluster CA, its nodes and owner, and a node's
// cluster membership, minted the way the product mints them (internal/pki),
// so that a test says what it needs ("a node of this CA") instead of the
// five lines that make one.
//
// The membership's shape is the cluster package's ClusterMembership; it is
// written out here (structurally the same) because testing sits below
// cluster and imports only pki and the generated protos.

import { create } from "@bufbuild/protobuf";
import type { KeyObject, X509Certificate } from "node:crypto";
import { ClusterDirectorySchema, type ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { createClusterCA, generateKeyPair, issueCuratorCertificate, issueNodeCertificate, issueOwnerCertificate, nodeIdFromPublicKey, rawPublicKey, type CA, type KeyPair } from "../pki/mod.ts";

/** What a client presents and trusts: the CA, its certificate and its key. */
export interface TestTls {
  ca: X509Certificate;
  certificate: X509Certificate;
  privateKey: KeyObject;
}

/** A node of a test CA. */
export interface TestNode {
  id: string;
  key: KeyPair;
  /** Its node certificate. */
  certificate: X509Certificate;
  /** As enrolment keeps them (cluster's NodeCredentials). */
  credentials: { nodeId: string; privateKey: KeyObject; publicKey: KeyObject; certificate: X509Certificate; ca: X509Certificate };
  /** For dialling the cluster as this node. */
  tls: TestTls;
}

/** The owner of a test CA's cluster. */
export interface TestOwner {
  key: KeyPair;
  certificate: X509Certificate;
  tls: TestTls;
}

/** A node's cluster membership (cluster's ClusterMembership), for role server tests. */
export interface TestMembership {
  credentials: TestNode["credentials"];
  address: string;
  directory: ClusterDirectory;
  clusterUnlockKey: Uint8Array;
}

/** A fresh cluster CA with its key, as bootstrap makes one. */
export function testCA(): CA {
  const key = generateKeyPair();
  return { certificate: createClusterCA(key), privateKey: key.privateKey };
}

/** A fresh node of `ca`: a key, the node ID it names, and a node certificate (for `ipAddresses`, when it serves). */
export function testNode(ca: CA, options: { ipAddresses?: readonly string[] } = {}): TestNode {
  const key = generateKeyPair();
  const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
  const certificate = issueNodeCertificate(ca, key.publicKey, options);
  return {
    id,
    key,
    certificate,
    credentials: { nodeId: id, privateKey: key.privateKey, publicKey: key.publicKey, certificate, ca: ca.certificate },
    tls: { ca: ca.certificate, certificate, privateKey: key.privateKey },
  };
}

/** How long a test curator's certificate is valid: longer than any test. */
const TEST_CURATOR_VALIDITY_MS = 3_600_000;

/** A fresh node of `ca` serving as a curator: a key and a curator certificate for `address`. */
export function testCurator(ca: CA, options: { address?: string } = {}): { id: string; key: KeyPair; certificate: X509Certificate } {
  const key = generateKeyPair();
  const certificate = issueCuratorCertificate(ca, key.publicKey, { address: options.address ?? "127.0.0.1", validForMs: TEST_CURATOR_VALIDITY_MS });
  return { id: nodeIdFromPublicKey(rawPublicKey(key.publicKey)), key, certificate };
}

/** A fresh owner key of `ca`'s cluster and its owner certificate. */
export function testOwner(ca: CA): TestOwner {
  const key = generateKeyPair();
  const certificate = issueOwnerCertificate(ca, key.publicKey);
  return { key, certificate, tls: { ca: ca.certificate, certificate, privateKey: key.privateKey } };
}

/** `node`'s membership of its cluster: at 127.0.0.1, knowing no curators, with an all-zero cluster unlock key unless told otherwise. */
export function testMembership(node: TestNode, options: Partial<Omit<TestMembership, "credentials">> = {}): TestMembership {
  return {
    credentials: node.credentials,
    address: options.address ?? "127.0.0.1",
    directory: options.directory ?? create(ClusterDirectorySchema),
    clusterUnlockKey: options.clusterUnlockKey ?? new Uint8Array(32),
  };
}
