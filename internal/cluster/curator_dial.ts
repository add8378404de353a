// Dialling curators from a node: before it has a certificate (register,
// commit, join: a self-signed certificate for the key it proves) and after
// (its node certificate). Servers must hold a certificate under the CA.

import type { X509Certificate, KeyObject } from "node:crypto";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { CURATOR_PORT } from "../curator/mod.ts";
import { selfSignedCertificate, type KeyPair } from "../pki/mod.ts";
import { channelCredentials, channelOptions, createClient, type ServiceClient } from "../rpc/mod.ts";

export type CuratorClient = ServiceClient<typeof Curator>;

/** "host" or "host:port" → "host:port" on the curator port. */
export function curatorTarget(host: string, port = CURATOR_PORT): string {
  return /:\d+$/.test(host) && !host.includes("::") ? host : `${host.includes(":") ? `[${host}]` : host}:${port}`;
}

/** Every curator address a directory names. */
export function directoryTargets(directory: ClusterDirectory | undefined, port = CURATOR_PORT): string[] {
  return [...new Set((directory?.nodes ?? []).flatMap((n) => n.addresses.map((a) => curatorTarget(a.host, port))))];
}

export function dialWithKey(target: string, ca: X509Certificate, key: KeyPair): CuratorClient {
  return createClient(Curator, target, {
    credentials: channelCredentials({ ca, certificate: selfSignedCertificate(key), privateKey: key.privateKey }),
    channelOptions: channelOptions(),
  });
}

export function dialAsNode(target: string, credentials: { ca: X509Certificate; certificate: X509Certificate; privateKey: KeyObject }): CuratorClient {
  return createClient(Curator, target, { credentials: channelCredentials(credentials), channelOptions: channelOptions() });
}
