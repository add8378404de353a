// JOIN: a member of the cluster boots again.
//
//   sealed configuration (ESP): join key, node unlock key, CA, directory
//     ─▶ JoinNode on any other curator (proving the join key) ─▶ cluster unlock key
//        (none reachable: a consensus member combines the shares the other
//         members hold for it, or, the only member, uses its cold-start key)
//     ─▶ data partition opened with the combined key ─▶ node credentials

import { X509Certificate, createPublicKey } from "node:crypto";
import type { SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import type { Logger } from "../log/mod.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { CURATOR_PORT, NoCuratorError, CuratorPool, endpointsOfDirectory, formatEndpoint, sameAddress, type CuratorEndpoint } from "../curator/client/mod.ts";
import { canonicalIp, commonNameOf, privateKeyFromRaw, selfSignedCertificate } from "../pki/mod.ts";
import { gatherShares, peersOf } from "../coldstart/mod.ts";
import { create } from "@bufbuild/protobuf";
import { ClusterDirectorySchema } from "../../proto/gen/common/common_pb.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import { CredentialsError, loadCredentials } from "./credentials.ts";
import type { Enrolled } from "./flow_bootstrap.ts";
import type { DataStorage } from "./data_storage.ts";
import { dataPartitionKey } from "./keys.ts";

export const JOIN_CALL_TIMEOUT_MS = 5_000;
export const JOIN_RETRY_MS = 3_000;

export interface JoinOptions {
  sealed: SealedConfiguration;
  /** This node's own address: its own curator is not running yet, so it is skipped. */
  ownAddress: string;
  layout: StorageLayout;
  storage: DataStorage;
  logger: Logger;
  signal: AbortSignal;
  curatorPort?: number | undefined;
}

/** Answers that mean the cluster will not let this node in, whichever curator is asked. */
function refusedForGood(err: unknown): boolean {
  return err instanceof RpcError && (err.code === Status.NOT_FOUND || err.code === Status.PERMISSION_DENIED || err.code === Status.FAILED_PRECONDITION);
}

/**
 * Asks the other curators for this node's cluster unlock key. Each is
 * expected to be the node the directory names at its address; but when a
 * genuine curator of this cluster (its certificate under the cluster CA,
 * for that very address) answers there as another node, the directory is
 * older than the cluster's consensus: a cluster restored from a backup, or
 * recovered, onto a new machine at an old curator's address. Such
 * addresses are asked again without the node's name (`unpinned`), and the
 * cluster unlock key it gets must still open this node's disk.
 */
async function fetchClusterUnlockKey(options: JoinOptions): Promise<{ clusterUnlockKey: Uint8Array; unpinned: Set<string> }> {
  const { sealed, logger, signal } = options;
  const joinKeyPrivate = privateKeyFromRaw(sealed.joinKey);
  const joinKey = { privateKey: joinKeyPrivate, publicKey: createPublicKey(joinKeyPrivate) };
  const credentials = { ca: new X509Certificate(sealed.clusterCa), certificate: selfSignedCertificate(joinKey), privateKey: joinKeyPrivate };
  const own: CuratorEndpoint = { host: options.ownAddress, port: options.curatorPort ?? CURATOR_PORT };
  let endpoints = endpointsOfDirectory(sealed.clusterDirectory, options.curatorPort).filter((e) => !sameAddress(e, own));
  const unpinned = new Set<string>();
  // One pool for all rounds: it remembers the leader between them.
  const pool = new CuratorPool(credentials);
  let lastShareMessage = "";
  try {
    for (;;) {
      signal.throwIfAborted();
      let lastReason: string;
      try {
        const { clusterUnlockKey, curator } = await pool.call(
          Curator,
          endpoints,
          async (client, endpoint) => ({ ...(await client.joinNode({}, { timeoutMs: JOIN_CALL_TIMEOUT_MS, signal })), curator: formatEndpoint(endpoint) }),
          { tryNextAfter: (err) => !refusedForGood(err) },
        );
        logger.info("got the cluster unlock key", { curator });
        return { clusterUnlockKey, unpinned };
      } catch (err) {
        if (refusedForGood(err)) throw new Error(`the cluster refused to let this node join: ${(err as RpcError).details}`, { cause: err });
        if (!(err instanceof NoCuratorError)) throw err;
        lastReason = err.message;
        const replaced = err.failures.filter((f) => f.kind === "identity" && f.endpoint.nodeId !== undefined && !unpinned.has(f.endpoint.host));
        if (replaced.length > 0) {
          for (const f of replaced) unpinned.add(f.endpoint.host);
          endpoints = endpoints.map((e) => (unpinned.has(e.host) ? { host: e.host, port: e.port } : e));
          logger.warn("curators of this cluster answer as other nodes than the sealed directory names (a cluster restored or recovered onto new machines?); asking them by address", {
            addresses: [...unpinned].join(","),
            lastError: lastReason,
          });
          continue;
        }
      }
      if (sealed.coldStartClusterUnlockKey.length > 0) {
        logger.warn(
          endpoints.length ? "no other curator reachable; cold start with the locally kept cluster unlock key" : "this node is the only curator; starting with the locally kept cluster unlock key",
          endpoints.length ? { lastError: lastReason } : {},
        );
        return { clusterUnlockKey: sealed.coldStartClusterUnlockKey, unpinned };
      }
      if ((sealed.unlockShares?.holders.length ?? 0) > 0) {
        const fromShares = await coldStartWithShares(sealed, logger, signal, (message) => {
          if (message !== lastShareMessage) logger.warn(message, { lastCuratorError: lastReason });
          lastShareMessage = message;
        });
        if (fromShares) return { clusterUnlockKey: fromShares, unpinned };
        await sleep(JOIN_RETRY_MS, signal);
        continue;
      }
      logger.info("waiting for a curator to let this node join", { tried: endpoints.length, lastError: lastReason });
      await sleep(JOIN_RETRY_MS, signal);
    }
  } finally {
    pool.close();
  }
}

/**
 * A cold start: no curator answers, so this consensus member asks the
 * holders of its shares (the other consensus members, by its sealed
 * directory) and combines them. Undefined, with `report` told who it waits
 * for, until enough of them answer.
 */
async function coldStartWithShares(sealed: SealedConfiguration, logger: Logger, signal: AbortSignal, report: (message: string) => void): Promise<Uint8Array | undefined> {
  if (sealed.joinCertificate.length === 0) throw new Error("the sealed configuration has shares but no join certificate to ask for them with");
  const joinCertificate = new X509Certificate(sealed.joinCertificate);
  const ownId = commonNameOf(joinCertificate) ?? "";
  const joinPrivate = privateKeyFromRaw(sealed.joinKey);
  const peers = peersOf(sealed.clusterDirectory ?? create(ClusterDirectorySchema), ownId);
  const gathered = await gatherShares({
    ownId,
    nodeUnlockKey: sealed.nodeUnlockKey,
    peers,
    tls: { ca: new X509Certificate(sealed.clusterCa), certificate: joinCertificate, privateKey: joinPrivate },
    signal,
  });
  const { result } = gathered;
  if (result.kind === "combined") {
    logger.info("cold start: this node's cluster half is whole again from its shares", { holders: gathered.answered.join(","), epoch: String(result.epoch) });
    return result.clusterHalf;
  }
  const need = result.need || sealed.unlockShares?.threshold || 1;
  const waiting = gathered.failed.map((f) => `${f.peer} (${f.reason})`).join("; ");
  report(`cold start: no curator answers; have ${result.have} of ${need} shares of this node's key; waiting for ${waiting || "more holders"}`);
  return undefined;
}

export async function joinCluster(options: JoinOptions): Promise<Enrolled> {
  const { logger, signal } = options;
  logger.info("joining the cluster");
  const { clusterUnlockKey, unpinned } = await fetchClusterUnlockKey(options);
  await options.storage.open(dataPartitionKey(options.sealed.nodeUnlockKey, clusterUnlockKey), logger, signal);
  const credentials = loadCredentials(options.layout);
  if (!credentials) {
    throw new CredentialsError("the data storage holds no node credentials: the node's first enrolment was interrupted before they were saved; wipe the disk and enrol the node again");
  }
  logger.info("joined", { node: credentials.nodeId });
  if (unpinned.size === 0) return { credentials, clusterUnlockKey };
  // The role server reaches those curators by address too, until the
  // cluster's own directory replaces this one (and the sealed one).
  const directory = create(ClusterDirectorySchema, options.sealed.clusterDirectory ?? {});
  for (const node of directory.nodes) if (node.addresses.some((a) => unpinned.has(canonicalIp(a.host)))) node.publicKey = new Uint8Array();
  return { credentials, clusterUnlockKey, directory };
}
