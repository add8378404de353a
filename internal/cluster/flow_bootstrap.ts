// BOOTSTRAP: this node creates a new cluster.
//
//   keys (node, join, node unlock, cluster unlock) + cluster CA + etcd CA
//     ─▶ sealed configuration on the ESP (from now on the node joins on boot)
//     ─▶ data partition formatted with the combined key, mounted
//     ─▶ node credentials + the pending bootstrap saved on the data partition
//     ─▶ the role server's control plane starts etcd as a new cluster, writes
//        the cluster's first state through the curator store, and clears the
//        pending bootstrap
//
// A crash after the sealed configuration is written resumes through the
// join path: the data opens with the locally kept cold-start key and the
// pending bootstrap is still there.

import { create } from "@bufbuild/protobuf";
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { SealedConfigurationSchema } from "../../proto/gen/api/configuration_pb.ts";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { createEtcdCA } from "../consensus/mod.ts";
import { writeFileDurably, writeSealedConfiguration, type StorageLayout } from "../localstorage/mod.ts";
import type { Logger } from "../log/mod.ts";
import { createClusterCA, generateKeyPair, issueNodeCertificate, nodeIdFromPublicKey, privateKeyFromRaw, rawPrivateKey, rawPublicKey, type CA } from "../pki/mod.ts";
import { saveCredentials, type NodeCredentials } from "./credentials.ts";
import type { DataStorage } from "./data_storage.ts";
import { dataPartitionKey, randomKey } from "./keys.ts";
import { X509Certificate } from "node:crypto";

/** What every enrolment flow ends with. */
export interface Enrolled {
  credentials: NodeCredentials;
  /** The cluster's half of the data key, kept in memory (and on the ESP of consensus nodes). */
  clusterUnlockKey: Uint8Array;
  /** A join's directory, when it differs from the sealed one (curators found by address: flow_join.ts). */
  directory?: ClusterDirectory;
}

/** What the control plane needs to create the cluster's first state. */
export interface PendingBootstrap {
  ownerPublicKey: Uint8Array;
  clusterCA: CA;
  etcdCA: CA;
  joinPublicKey: Uint8Array;
  clusterUnlockKey: Uint8Array;
  /** The cluster's cold-start share threshold (0: a majority). */
  unlockShareThreshold: number;
}

const PENDING_FILE = "bootstrap-pending.json";

export function pendingBootstrapPath(layout: StorageLayout): string {
  return join(layout.data.node.path, PENDING_FILE);
}

export function encodeCAJson(ca: CA): { certificate: string; privateKey: string } {
  return { certificate: ca.certificate.raw.toString("base64"), privateKey: Buffer.from(rawPrivateKey(ca.privateKey)).toString("base64") };
}

export function decodeCAJson(json: { certificate: string; privateKey: string }): CA {
  return { certificate: new X509Certificate(Buffer.from(json.certificate, "base64")), privateKey: privateKeyFromRaw(Buffer.from(json.privateKey, "base64")) };
}

export function savePendingBootstrap(layout: StorageLayout, pending: PendingBootstrap): void {
  const b64 = (b: Uint8Array) => Buffer.from(b).toString("base64");
  writeFileDurably(
    pendingBootstrapPath(layout),
    JSON.stringify({
      ownerPublicKey: b64(pending.ownerPublicKey),
      clusterCA: encodeCAJson(pending.clusterCA),
      etcdCA: encodeCAJson(pending.etcdCA),
      joinPublicKey: b64(pending.joinPublicKey),
      clusterUnlockKey: b64(pending.clusterUnlockKey),
      unlockShareThreshold: pending.unlockShareThreshold,
    }),
    { mode: 0o600 },
  );
}

export function loadPendingBootstrap(layout: StorageLayout): PendingBootstrap | undefined {
  const path = pendingBootstrapPath(layout);
  if (!existsSync(path)) return undefined;
  const json = JSON.parse(readFileSync(path, "utf8"));
  const bytes = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
  return {
    ownerPublicKey: bytes(json.ownerPublicKey),
    clusterCA: decodeCAJson(json.clusterCA),
    etcdCA: decodeCAJson(json.etcdCA),
    joinPublicKey: bytes(json.joinPublicKey),
    clusterUnlockKey: bytes(json.clusterUnlockKey),
    unlockShareThreshold: typeof json.unlockShareThreshold === "number" ? json.unlockShareThreshold : 0,
  };
}

export function clearPendingBootstrap(layout: StorageLayout): void {
  rmSync(pendingBootstrapPath(layout), { force: true });
}

export interface BootstrapOptions {
  ownerPublicKey: Uint8Array;
  /** From the node parameters: the cluster's cold-start share threshold (0: a majority). */
  unlockShareThreshold?: number;
  layout: StorageLayout;
  storage: DataStorage;
  /** This node's address (goes into its certificate and the directory). */
  address: string;
  logger: Logger;
  signal: AbortSignal;
}

/**
 * The first steps of a node that starts a cluster on its own (a bootstrap,
 * or a restore from a backup) under `clusterCA`: its keys, the sealed
 * configuration naming it the only curator (from here on the node joins on
 * boot), its data storage opened with both halves, and its credentials
 * saved there.
 */
export async function becomeFirstMember(options: {
  layout: StorageLayout;
  storage: DataStorage;
  address: string;
  clusterCA: CA;
  logger: Logger;
  signal: AbortSignal;
}): Promise<Enrolled & { joinPublicKey: Uint8Array }> {
  const { layout, logger, clusterCA } = options;
  const nodeKey = generateKeyPair();
  const joinKey = generateKeyPair();
  const nodeUnlockKey = randomKey();
  const clusterUnlockKey = randomKey();
  const nodeId = nodeIdFromPublicKey(rawPublicKey(nodeKey.publicKey));
  writeSealedConfiguration(
    layout.esp.sealed,
    create(SealedConfigurationSchema, {
      nodeUnlockKey,
      joinKey: rawPrivateKey(joinKey.privateKey),
      clusterCa: new Uint8Array(clusterCA.certificate.raw),
      clusterDirectory: { nodes: [{ publicKey: rawPublicKey(nodeKey.publicKey), joinKey: rawPublicKey(joinKey.publicKey), addresses: [{ host: options.address }] }] },
      coldStartClusterUnlockKey: clusterUnlockKey,
    }),
  );
  logger.info("sealed configuration written; the node joins from now on", { node: nodeId });
  const result = await options.storage.open(dataPartitionKey(nodeUnlockKey, clusterUnlockKey), logger, options.signal);
  logger.info("data storage ready", { result });
  const credentials: NodeCredentials = {
    nodeId,
    privateKey: nodeKey.privateKey,
    publicKey: nodeKey.publicKey,
    certificate: issueNodeCertificate(clusterCA, nodeKey.publicKey, { ipAddresses: [options.address] }),
    ca: clusterCA.certificate,
  };
  saveCredentials(layout, credentials);
  return { credentials, clusterUnlockKey, joinPublicKey: rawPublicKey(joinKey.publicKey) };
}

export async function bootstrapCluster(options: BootstrapOptions): Promise<Enrolled> {
  const { layout, logger } = options;
  logger.info("bootstrapping a new cluster");
  const caKey = generateKeyPair();
  const clusterCA: CA = { certificate: createClusterCA(caKey), privateKey: caKey.privateKey };
  const etcdCAKey = generateKeyPair();
  const etcdCA: CA = { certificate: createEtcdCA(etcdCAKey), privateKey: etcdCAKey.privateKey };
  const { credentials, joinPublicKey, clusterUnlockKey } = await becomeFirstMember({ ...options, clusterCA });
  savePendingBootstrap(layout, {
    ownerPublicKey: options.ownerPublicKey,
    clusterCA,
    etcdCA,
    joinPublicKey,
    clusterUnlockKey,
    unlockShareThreshold: options.unlockShareThreshold ?? 0,
  });
  logger.info("node credentials saved; the control plane will create the cluster", { node: credentials.nodeId });
  return { credentials, clusterUnlockKey };
}
