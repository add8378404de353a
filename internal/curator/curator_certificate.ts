// The curator's own serving certificate. A curator mints it from the
// cluster CA in etcd, and only when the cluster's records make its node a
// consensus member with a recorded address: the certificate is the proof,
// to every client, that this server is the cluster's control service at
// that address (client/identity.ts checks it). It is short-lived and
// renewed while the role holds; when the role goes, so does the renewal.
//
// Only consensus members can read etcd (and so the CA key) at all, so a
// curator minting its own certificate grants nothing its node did not
// already have; what it must never do is mint one without the role, and the
// record check below is that rule.

import type { KeyObject, X509Certificate } from "node:crypto";
import { issueCuratorCertificate, nodeIdFromPublicKey, rawPublicKey } from "../pki/mod.ts";
import { consensusAddressOf } from "./client/mod.ts";
import type { CuratorStore } from "./store.ts";

/** How long a curator certificate is valid. It is renewed at half that. */
export const CURATOR_CERTIFICATE_VALIDITY_MS = 60 * 60 * 1000;

export class NotAConsensusMemberError extends Error {
  override name = "NotAConsensusMemberError";
}

export interface CuratorCertificate {
  certificate: X509Certificate;
  /** The address the cluster recorded for this consensus member. */
  address: string;
}

/** Issues this node's curator certificate, if the cluster's records allow it. */
export async function issueOwnCuratorCertificate(store: CuratorStore, publicKey: KeyObject, validForMs = CURATOR_CERTIFICATE_VALIDITY_MS): Promise<CuratorCertificate> {
  const nodeId = nodeIdFromPublicKey(rawPublicKey(publicKey));
  const record = await store.node(nodeId);
  if (!record) throw new NotAConsensusMemberError(`node ${nodeId} has no record in the cluster; it cannot serve as a curator`);
  if (!Buffer.from(record.value.publicKey).equals(Buffer.from(rawPublicKey(publicKey)))) {
    throw new NotAConsensusMemberError(`the cluster's record of ${nodeId} holds another key; not serving as a curator`);
  }
  const address = consensusAddressOf(record.value);
  if (!address) throw new NotAConsensusMemberError(`node ${nodeId} is not a consensus member in the cluster's records; it cannot serve as a curator`);
  const ca = await store.ca("cluster");
  return { certificate: issueCuratorCertificate(ca, publicKey, { address, validForMs }), address };
}
