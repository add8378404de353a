// Who is calling: the caller's certificate, checked against the cluster CA.

import type { X509Certificate } from "node:crypto";
import {
  JOIN_ORGANIZATION,
  METRICS_READER_ORGANIZATION,
  NODE_ORGANIZATION,
  OWNER_ORGANIZATION,
  commonNameOf,
  nodeIdFromPublicKey,
  NODE_ID_PATTERN,
  organizationOf,
  rawPublicKey,
  verifyIssuedBy,
} from "../pki/mod.ts";

/**
 * The authenticated caller of one call.
 *  owner:  holds the owner certificate under the cluster CA.
 *  node:   holds a node certificate under the cluster CA.
 *  join:   holds a node's join certificate under the cluster CA (the key a
 *          node unseals its share of the cluster with; it names the node).
 *  metrics: holds a metrics reader certificate under the cluster CA: it
 *          may read a node's metrics (internal/metrics), and call nothing.
 *  key:    presented some other certificate (self-signed, foreign CA, or
 *          expired): the handshake proves it holds that key, nothing more.
 *  anonymous: sent no certificate.
 *  local:  a process on this node, on a unix socket of a local service
 *          (listenLocal): the socket file's permissions let it in, and
 *          no certificate is involved (the kubelet calling the node's
 *          volume plugin).
 */
export type Peer =
  | { kind: "owner"; certificate: X509Certificate }
  | { kind: "node"; nodeId: string; publicKey: Uint8Array; certificate: X509Certificate }
  | { kind: "join"; nodeId: string; publicKey: Uint8Array; certificate: X509Certificate }
  | { kind: "metrics"; name: string; certificate: X509Certificate }
  | { kind: "key"; publicKey: Uint8Array; certificate: X509Certificate; whyNotCluster: string }
  | { kind: "anonymous" }
  | { kind: "local" };

export function authenticate(certificate: X509Certificate | undefined, ca: X509Certificate): Peer {
  if (!certificate) return { kind: "anonymous" };
  const publicKey = rawPublicKey(certificate.publicKey);
  if (certificate.publicKey.asymmetricKeyType !== "ed25519") {
    return { kind: "key", publicKey, certificate, whyNotCluster: "certificate key is not ed25519" };
  }
  const problem = verifyIssuedBy(certificate, ca);
  if (problem) return { kind: "key", publicKey, certificate, whyNotCluster: problem };
  switch (organizationOf(certificate)) {
    case OWNER_ORGANIZATION:
      return { kind: "owner", certificate };
    case NODE_ORGANIZATION: {
      const nodeId = nodeIdFromPublicKey(publicKey);
      if (commonNameOf(certificate) !== nodeId) {
        return { kind: "key", publicKey, certificate, whyNotCluster: "node certificate name does not match its key" };
      }
      return { kind: "node", nodeId, publicKey, certificate };
    }
    case JOIN_ORGANIZATION: {
      const nodeId = commonNameOf(certificate) ?? "";
      if (!NODE_ID_PATTERN.test(nodeId)) return { kind: "key", publicKey, certificate, whyNotCluster: "join certificate names no node" };
      return { kind: "join", nodeId, publicKey, certificate };
    }
    case METRICS_READER_ORGANIZATION:
      return { kind: "metrics", name: commonNameOf(certificate) ?? "", certificate };
    default:
      return { kind: "key", publicKey, certificate, whyNotCluster: "certificate is neither an owner, a node, a join nor a metrics reader certificate" };
  }
}

/**
 * Who may call a method:
 *  owner: the owner certificate.      node: a node certificate.
 *  cluster: owner or node.            join: a node's join certificate.
 *  key: any certificate (the handler checks the key).
 *  local: a process on this node, through a local service's unix socket.
 */
export type Policy = "owner" | "node" | "cluster" | "join" | "key" | "local";

/** Why the peer may not call under this policy, or undefined if it may. */
export function refusal(peer: Peer, policy: Policy): { code: "unauthenticated" | "permission-denied"; reason: string } | undefined {
  // Local and remote callers never share a method.
  if (peer.kind === "local") return policy === "local" ? undefined : { code: "permission-denied", reason: "a caller on a local socket may call only the node's local services" };
  if (policy === "local") return { code: "permission-denied", reason: "only a process on this node may call this, through its local socket" };
  if (peer.kind === "anonymous") {
    return { code: "unauthenticated", reason: "no client certificate presented" };
  }
  // A scraper's key opens no API, whatever the method's policy.
  if (peer.kind === "metrics") return { code: "permission-denied", reason: "a metrics reader certificate may only read metrics" };
  if (policy === "key") return undefined;
  if (peer.kind === "key") {
    return { code: "unauthenticated", reason: `client certificate not accepted: ${peer.whyNotCluster}` };
  }
  switch (policy) {
    case "owner":
      return peer.kind === "owner" ? undefined : { code: "permission-denied", reason: "only the cluster owner may call this" };
    case "node":
      return peer.kind === "node" ? undefined : { code: "permission-denied", reason: "only cluster nodes may call this" };
    case "cluster":
      return peer.kind === "join" ? { code: "permission-denied", reason: "a join certificate may only fetch its node's cold-start shares" } : undefined;
    case "join":
      return peer.kind === "join" ? undefined : { code: "permission-denied", reason: "only a node's join certificate may call this" };
    default: {
      const unreachable: never = policy;
      throw new Error(`unknown policy ${unreachable}`);
    }
  }
}
