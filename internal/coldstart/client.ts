// Calling other consensus members' share holders: leaving a share there
// (as a running consensus member), and asking for one's own shares back (at
// a cold start, with nothing but the ESP). The server must present the join
// certificate of the very node the caller meant to reach.

import type { KeyObject, X509Certificate } from "node:crypto";
import { ShareHolder, type ShareBody } from "../../proto/gen/coldstart/coldstart_pb.ts";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { joinCertificateProblem, nodeIdFromPublicKey } from "../pki/mod.ts";
import { channelCredentials, channelOptions, createClient, hostPort, type ServiceClient } from "../rpc/mod.ts";
import { SHARE_HOLDER_PORT } from "./server.ts";
import { combineShares, openWrapped, ShareError, type CombineResult } from "./shares.ts";

/** How long one call to a share holder may take. */
export const SHARE_CALL_TIMEOUT_MS = 5_000;

export interface ShareClientTls {
  ca: X509Certificate;
  /** A node certificate (to leave shares) or the join certificate (to fetch them). */
  certificate: X509Certificate;
  privateKey: KeyObject;
}

export function dialShareHolder(holderId: string, host: string, tls: ShareClientTls, port = SHARE_HOLDER_PORT): ServiceClient<typeof ShareHolder> {
  return createClient(ShareHolder, hostPort(host, port), {
    credentials: channelCredentials({
      server: { ca: tls.ca, verify: (certificate) => joinCertificateProblem(certificate, tls.ca, holderId) },
      certificate: tls.certificate,
      privateKey: tls.privateKey,
    }),
    channelOptions: channelOptions(holderId),
  });
}

export interface Peer {
  id: string;
  host: string;
  joinKey: Uint8Array;
}

/** The consensus members of a directory other than `ownId`, with what is needed to reach and seal to them. */
export function peersOf(directory: ClusterDirectory, ownId: string): Peer[] {
  return directory.nodes.flatMap((n) => {
    const id = nodeIdFromPublicKey(n.publicKey);
    const host = n.addresses[0]?.host;
    return id !== ownId && host ? [{ id, host, joinKey: n.joinKey }] : [];
  });
}

export interface GatherOptions {
  ownId: string;
  nodeUnlockKey: Uint8Array;
  peers: readonly Peer[];
  tls: ShareClientTls;
  port?: number;
  signal: AbortSignal;
}

export interface GatherResult {
  result: CombineResult;
  /** Peers that gave shares that open. */
  answered: string[];
  /** Peers that did not, and why. */
  failed: { peer: string; reason: string }[];
}

/** Asks every peer for this node's shares, and combines them if there are enough. */
export async function gatherShares(options: GatherOptions): Promise<GatherResult> {
  const bodies: ShareBody[] = [];
  const answered: string[] = [];
  const failed: { peer: string; reason: string }[] = [];
  await Promise.all(
    options.peers.map(async (peer) => {
      const client = dialShareHolder(peer.id, peer.host, options.tls, options.port);
      try {
        const response = await client.getShares({ nodeId: options.ownId }, { timeoutMs: SHARE_CALL_TIMEOUT_MS, signal: options.signal });
        for (const share of response.shares) {
          bodies.push(openWrapped(options.nodeUnlockKey, options.ownId, peer.id, share));
        }
        answered.push(peer.id);
      } catch (err) {
        failed.push({ peer: peer.id, reason: err instanceof ShareError ? `refused its share: ${err.message}` : (err as Error).message });
      } finally {
        client.close();
      }
    }),
  );
  return { result: await combineShares(bodies), answered: answered.sort(), failed: failed.sort((a, b) => a.peer.localeCompare(b.peer)) };
}
