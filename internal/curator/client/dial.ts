// Dialling a curator: TLS under the cluster CA, and the server must prove
// it is a curator at that endpoint (identity.ts), on every connection.

import type { DescService } from "@bufbuild/protobuf";
import type { KeyObject, X509Certificate } from "node:crypto";
import { channelCredentials, channelOptions, createClient, type ServiceClient } from "../../rpc/mod.ts";
import { formatAddress, type CuratorEndpoint } from "./endpoint.ts";
import { curatorIdentityProblem } from "./identity.ts";

export interface DialCredentials {
  /** The cluster CA: the curator's certificate must chain to it. */
  ca: X509Certificate;
  /** The caller's certificate (owner, node, or self-signed for the handshake calls) and key. */
  certificate?: X509Certificate;
  privateKey?: KeyObject;
}

/** A client of one curator, which remembers why that curator's identity was refused, if it was. */
export type CuratorClientOf<S> = ServiceClient<S> & { identityProblem(): string | undefined };

export function dialCurator<S extends DescService>(service: S, endpoint: CuratorEndpoint, credentials: DialCredentials): CuratorClientOf<S> {
  let problem: string | undefined;
  const client = createClient(service, formatAddress(endpoint), {
    credentials: channelCredentials({
      server: {
        ca: credentials.ca,
        verify: (certificate) => (problem = curatorIdentityProblem(certificate, endpoint)),
      },
      ...(credentials.certificate ? { certificate: credentials.certificate } : {}),
      ...(credentials.privateKey ? { privateKey: credentials.privateKey } : {}),
    }),
    // SNI only (bun refuses IP addresses there); identity is checked above.
    channelOptions: channelOptions(endpoint.nodeId),
  });
  return Object.assign(client, { identityProblem: () => problem });
}
