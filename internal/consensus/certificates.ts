// The etcd peer CA, member certificates, and the TLS material the member
// and its clients are given. Both etcd_process.ts and etcd_client.ts import
// this file; it imports neither.

import type { KeyObject, X509Certificate } from "node:crypto";
import { createCertificate, type CA, type KeyPair } from "../pki/mod.ts";

export const ETCD_CA_COMMON_NAME = "nodecore etcd peer CA";
/**
 * The TLS server name clients verify: every etcd member certificate carries
 * it (bun's TLS refuses IP addresses as server names).
 */
export const ETCD_SERVER_NAME = "localhost";

/** Certificates for etcd's peer and client TLS, all under the etcd peer CA. */
export interface EtcdTls {
  ca: X509Certificate;
  certificate: X509Certificate;
  privateKey: KeyObject;
}

export function createEtcdCA(key: KeyPair): X509Certificate {
  return createCertificate({ commonName: ETCD_CA_COMMON_NAME, organization: "nodecore", publicKey: key.publicKey, kind: "ca" }, { privateKey: key.privateKey });
}

/**
 * A member certificate: serves etcd's peer and client ports and is etcd's
 * client identity. Names the member and carries every address it listens on.
 */
export function issueMemberCertificate(ca: CA, publicKey: KeyObject, options: { name: string; addresses: readonly string[] }): X509Certificate {
  return createCertificate(
    {
      commonName: options.name,
      organization: "nodecore etcd member",
      publicKey,
      kind: "peer",
      dnsNames: [ETCD_SERVER_NAME, options.name],
      ipAddresses: [...new Set(["127.0.0.1", ...options.addresses])],
    },
    ca,
  );
}

/**
 * A client-only certificate of the local etcd member, for a program that is
 * not a member (the Kubernetes apiserver): it can read and write etcd but
 * can never serve as, or pass for, a peer.
 */
export function issueEtcdClientCertificate(ca: CA, publicKey: KeyObject, name: string): X509Certificate {
  return createCertificate({ commonName: name, organization: "nodecore etcd client", publicKey, kind: "client" }, ca);
}
