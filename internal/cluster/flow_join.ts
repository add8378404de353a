// JOIN: a member of the cluster boots again.
//
//   sealed configuration (ESP): join key, node unlock key, CA, directory
//     ─▶ JoinNode on any other curator (proving the join key) ─▶ cluster unlock key
//        (none reachable and this node keeps a cold-start key: use it)
//     ─▶ data partition opened with the combined key ─▶ node credentials

import { X509Certificate, createPublicKey } from "node:crypto";
import type { SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import type { Logger } from "../log/mod.ts";
import { privateKeyFromRaw } from "../pki/mod.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import { CredentialsError, loadCredentials } from "./credentials.ts";
import type { Enrolled } from "./flow_bootstrap.ts";
import { curatorTarget, dialWithKey, directoryTargets } from "./curator_dial.ts";
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
  curatorPort?: number;
}

/** Asks the other curators for this node's cluster unlock key. */
async function fetchClusterUnlockKey(options: JoinOptions): Promise<Uint8Array> {
  const { sealed, logger, signal } = options;
  const ca = new X509Certificate(sealed.clusterCa);
  const joinKeyPrivate = privateKeyFromRaw(sealed.joinKey);
  const joinKey = { privateKey: joinKeyPrivate, publicKey: createPublicKey(joinKeyPrivate) };
  const own = curatorTarget(options.ownAddress, options.curatorPort);
  const targets = directoryTargets(sealed.clusterDirectory, options.curatorPort).filter((t) => t !== own);
  let lastReason = "";
  for (;;) {
    for (const target of targets) {
      signal.throwIfAborted();
      const client = dialWithKey(target, ca, joinKey);
      try {
        const { clusterUnlockKey } = await client.joinNode({}, { timeoutMs: JOIN_CALL_TIMEOUT_MS, signal });
        logger.info("got the cluster unlock key", { curator: target });
        return clusterUnlockKey;
      } catch (err) {
        if (err instanceof RpcError && (err.code === Status.NOT_FOUND || err.code === Status.PERMISSION_DENIED || err.code === Status.FAILED_PRECONDITION)) {
          throw new Error(`the cluster refused to let this node join: ${err.details}`, { cause: err });
        }
        lastReason = `${target}: ${(err as Error).message}`;
      } finally {
        client.close();
      }
    }
    if (sealed.coldStartClusterUnlockKey.length > 0) {
      logger.warn(
        targets.length ? "no other curator reachable; cold start with the locally kept cluster unlock key" : "this node is the only curator; starting with the locally kept cluster unlock key",
        targets.length ? { lastError: lastReason } : {},
      );
      return sealed.coldStartClusterUnlockKey;
    }
    logger.info("waiting for a curator to let this node join", { tried: targets.length, lastError: lastReason });
    await sleep(JOIN_RETRY_MS, signal);
  }
}

export async function joinCluster(options: JoinOptions): Promise<Enrolled> {
  const { logger, signal } = options;
  logger.info("joining the cluster");
  const clusterUnlockKey = await fetchClusterUnlockKey(options);
  await options.storage.open(dataPartitionKey(options.sealed.nodeUnlockKey, clusterUnlockKey), logger, signal);
  const credentials = loadCredentials(options.layout);
  if (!credentials) {
    throw new CredentialsError(
      "the data storage holds no node credentials: the node's first enrolment was interrupted before they were saved; wipe the disk and enrol the node again",
    );
  }
  logger.info("joined", { node: credentials.nodeId });
  return { credentials, clusterUnlockKey };
}
