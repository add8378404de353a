// Dialling a curator: TLS under the cluster CA, and the server must prove
// it is a curator at that endpoint (identity.ts), on every connection.
//
// Channel options, so that no caller waits on a dead connection:
//  - keepalive pings every KEEPALIVE_TIME_MS, also without calls: a curator
//    that was powered off (no FIN, no RST) is noticed within
//    KEEPALIVE_TIME_MS + KEEPALIVE_TIMEOUT_MS instead of after TCP's minutes.
//    grpc-js servers answer pings at any rate (they have no "too many
//    pings" policing), so the servers need no matching setting. A ping is
//    answered by the server's process, not its kernel, so the timeout must
//    outlast the longest a loaded node's process is away: at 2 s, a node
//    starting its apiserver under emulation on a slow day had every call
//    of the owner's ctl cluster info, for 5 minutes, and its own heartbeats
//    "dropped during the call" by the client's own ping timer
//    (internal/rpc/listener.test.ts shows it with a server away for 6 s).
//  - reconnect backoff from RECONNECT_BACKOFF_MS.initial up to .max (grpc-js
//    defaults to 1 s growing to 120 s, which made failover take 16-43 s);
//  - a subchannel pool per channel, so that one client's backoff is not
//    inherited by the next client of the same address;
//  - the connect deadline is the caller's: client.connect(ms) (pool.ts).

import type { DescService } from "@bufbuild/protobuf";
import type { KeyObject, X509Certificate } from "node:crypto";
import { channelCredentials, channelOptions, createClient, type ServiceClient } from "../../rpc/mod.ts";
import { formatAddress, type CuratorEndpoint } from "./endpoint.ts";
import { curatorIdentityProblem } from "./identity.ts";

export const KEEPALIVE_TIME_MS = 3_000;
export const KEEPALIVE_TIMEOUT_MS = 20_000;

/** The keepalive of every curator client's channel (dialCurator). */
export function keepaliveOptions(timing = { timeMs: KEEPALIVE_TIME_MS, timeoutMs: KEEPALIVE_TIMEOUT_MS }): Record<string, number> {
  return { "grpc.keepalive_time_ms": timing.timeMs, "grpc.keepalive_timeout_ms": timing.timeoutMs, "grpc.keepalive_permit_without_calls": 1 };
}
export const RECONNECT_BACKOFF_MS = { initial: 200, max: 2_000 } as const;

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
    channelOptions: {
      // SNI only (bun refuses IP addresses there); identity is checked above.
      ...channelOptions(endpoint.nodeId),
      ...keepaliveOptions(),
      "grpc.initial_reconnect_backoff_ms": RECONNECT_BACKOFF_MS.initial,
      "grpc.max_reconnect_backoff_ms": RECONNECT_BACKOFF_MS.max,
      "grpc.use_local_subchannel_pool": 1,
    },
  });
  return Object.assign(client, { identityProblem: () => problem });
}
