// REGISTER: this node becomes a new member of an existing cluster.
//
//   RegisterNode(ticket, join key) ─▶ NEW ── owner approves ──▶ STANDBY
//   CommitNode(cluster unlock key) ─▶ UP, node certificate
//   ─▶ data partition formatted with the combined key ─▶ sealed configuration
//
// Registration is retried against every curator in the directory until one
// answers; a wrong ticket is final (only the operator can fix parameters).

import { create } from "@bufbuild/protobuf";
import { X509Certificate, createPublicKey } from "node:crypto";
import { SealedConfigurationSchema } from "../../proto/gen/api/configuration_pb.ts";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { writeSealedConfiguration, type StorageLayout } from "../localstorage/mod.ts";
import type { Logger } from "../log/mod.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { CuratorPool, endpointsOfDirectory, NoCuratorError, type CuratorClientOf, type CuratorEndpoint, type DialCredentials } from "../curator/client/mod.ts";
import { generateKeyPair, nodeIdFromPublicKey, rawPrivateKey, rawPublicKey, selfSignedCertificate, verifyIssuedBy } from "../pki/mod.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import { sleep } from "../supervisor/mod.ts";
import { saveCredentials, type NodeCredentials } from "./credentials.ts";
import type { Enrolled } from "./flow_bootstrap.ts";
import type { DataStorage } from "./data_storage.ts";
import { dataPartitionKey, randomKey } from "./keys.ts";
import { ParametersError } from "./node_parameters.ts";

/** How long to wait between rounds of trying every curator. */
export const REGISTER_RETRY_MS = 3_000;
/**
 * The same while the curators answer that the owner has not approved this
 * node yet: one cheap call a second, so that the node goes on within a
 * second of its approval.
 */
export const APPROVAL_POLL_MS = 1_000;
/** One call's deadline. */
export const REGISTER_CALL_TIMEOUT_MS = 10_000;

export interface RegisterOptions {
  ticket: Uint8Array;
  caCertificate: X509Certificate;
  directory: ClusterDirectory;
  layout: StorageLayout;
  storage: DataStorage;
  logger: Logger;
  signal: AbortSignal;
  curatorPort?: number | undefined;
}

/**
 * Calls `call` on the curators until one succeeds, round after round.
 * `waiting(err)` turns an error worth waiting out into the line to log
 * (once per change); any other error is final.
 */
async function untilOneAnswers<T>(
  endpoints: CuratorEndpoint[],
  credentials: DialCredentials,
  call: (client: CuratorClientOf<typeof Curator>) => Promise<T>,
  options: { logger: Logger; signal: AbortSignal; waiting: (err: unknown) => string | undefined; retryMs?: number },
): Promise<T> {
  let lastReason = "";
  // One pool for all rounds: it remembers the leader between them.
  const pool = new CuratorPool(credentials);
  try {
    for (;;) {
      options.signal.throwIfAborted();
      let reason: string | undefined;
      try {
        return await pool.call(Curator, endpoints, call, { tryNextAfter: (err) => options.waiting(err) !== undefined });
      } catch (err) {
        if (!(err instanceof NoCuratorError)) throw err;
        // The reason of the last curator that answered at all, else why none did.
        const answered = err.failures.findLast((f) => f.error !== undefined);
        reason = answered ? options.waiting(answered.error) : `waiting for a curator: ${err.message}`;
      }
      if (reason !== lastReason) options.logger.info(reason ?? "waiting for a curator");
      lastReason = reason ?? "";
      await sleep(options.retryMs ?? REGISTER_RETRY_MS, options.signal);
    }
  } finally {
    pool.close();
  }
}

export async function registerNode(options: RegisterOptions): Promise<Enrolled> {
  const { logger, signal, layout } = options;
  const endpoints = endpointsOfDirectory(options.directory, options.curatorPort);
  const nodeKey = generateKeyPair();
  const joinKey = generateKeyPair();
  const nodeUnlockKey = randomKey();
  const clusterUnlockKey = randomKey();
  const nodeId = nodeIdFromPublicKey(rawPublicKey(nodeKey.publicKey));
  const asNodeKey: DialCredentials = { ca: options.caCertificate, certificate: selfSignedCertificate(nodeKey), privateKey: nodeKey.privateKey };
  logger.info("registering into the cluster", { node: nodeId, curators: endpoints.length });

  const unreachable = (err: unknown) =>
    err instanceof RpcError && (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED) ? `waiting for a curator to answer: ${err.details}` : undefined;
  try {
    await untilOneAnswers(endpoints, asNodeKey, (c) => c.registerNode({ registerTicket: options.ticket, joinKey: rawPublicKey(joinKey.publicKey) }, { timeoutMs: REGISTER_CALL_TIMEOUT_MS, signal }), {
      logger,
      signal,
      waiting: unreachable,
    });
  } catch (err) {
    if (err instanceof RpcError && err.code === Status.PERMISSION_DENIED) {
      throw new ParametersError(`the cluster refused the register ticket in this node's parameters: ${err.details}`);
    }
    throw err;
  }
  logger.info("registered; waiting for the owner to approve this node", { node: nodeId, approve: `ctl node approve ${nodeId}` });

  const committed = await untilOneAnswers(endpoints, asNodeKey, (c) => c.commitNode({ clusterUnlockKey }, { timeoutMs: REGISTER_CALL_TIMEOUT_MS, signal }), {
    logger,
    signal,
    retryMs: APPROVAL_POLL_MS,
    waiting: (err) => (err instanceof RpcError && err.code === Status.FAILED_PRECONDITION ? `waiting for the owner to approve node ${nodeId} (ctl node approve ${nodeId})` : unreachable(err)),
  });
  const ca = new X509Certificate(committed.caCertificate);
  const certificate = new X509Certificate(committed.nodeCertificate);
  const problem = verifyIssuedBy(certificate, options.caCertificate) ?? (ca.fingerprint256 === options.caCertificate.fingerprint256 ? undefined : "CA changed");
  if (problem) throw new Error(`the curator returned an unusable node certificate: ${problem}`);
  logger.info("committed: this node is part of the cluster", { node: nodeId });

  await options.storage.open(dataPartitionKey(nodeUnlockKey, clusterUnlockKey), logger, signal);
  const credentials: NodeCredentials = { nodeId, privateKey: nodeKey.privateKey, publicKey: createPublicKey(nodeKey.privateKey), certificate, ca };
  saveCredentials(layout, credentials);
  writeSealedConfiguration(
    layout.esp.sealed,
    create(SealedConfigurationSchema, {
      nodeUnlockKey,
      joinKey: rawPrivateKey(joinKey.privateKey),
      clusterCa: new Uint8Array(ca.raw),
      clusterDirectory: options.directory,
    }),
  );
  logger.info("sealed configuration written; the node joins from now on");
  return { credentials, clusterUnlockKey };
}
