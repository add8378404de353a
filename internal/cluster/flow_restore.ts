// RESTORE: this node creates the cluster again from a backup's snapshot
// (`ctl params restore BACKUP FILE`, after every consensus member is lost).
//
//   parameters: owner key + snapshot + the owner's pinned CA (+ the
//     backup's header and CA signature, checked when the parameters are
//     read: node_parameters.ts) ─▶ a throwaway etcd member reads it
//     (internal/backup/restore.ts): cluster record (same owner?), both CAs
//     (the cluster CA exactly the pinned one?)
//   ─▶ keys (node, join, node unlock, cluster unlock) ─▶ sealed
//     configuration with the backup's CA ─▶ data partition formatted,
//     mounted ─▶ node credentials under the backup's CA, and the pending
//     restore (the snapshot, the etcd CA, this node's halves) saved on the
//     data partition ─▶ the parameters deleted from the ESP
//   ─▶ the role server's control plane turns the snapshot into its etcd
//     member's data (a cluster of this node alone), writes this node's
//     record, drops every other node's consensus role, and clears the
//     pending restore (worker_controlplane.ts)
//
// The cluster keeps its CA, its node records and every node's cluster
// half: nodes enrolled before the backup join again with their own disks.
// Nodes enrolled after it are unknown to it and cannot open theirs.
//
// A crash after the sealed configuration is written resumes through the
// join path, as a bootstrap does: the data opens with the cold-start key,
// and the pending restore is still there.

import type { X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { readSnapshot, type SnapshotStateReader } from "../backup/mod.ts";
import { writeFileDurably, type StorageLayout } from "../localstorage/mod.ts";
import type { Logger } from "../log/mod.ts";
import type { CA } from "../pki/mod.ts";
import type { DataStorage } from "./data_storage.ts";
import { becomeFirstMember, decodeCAJson, encodeCAJson, type Enrolled } from "./flow_bootstrap.ts";
import { ParametersError } from "./node_parameters.ts";

/** What the control plane needs to finish a restore once etcd runs on the snapshot. */
export interface PendingRestore {
  /** etcd's snapshot, on the data partition. */
  snapshotFile: string;
  etcdCA: CA;
  joinPublicKey: Uint8Array;
  clusterUnlockKey: Uint8Array;
}

const PENDING_DIR = "restore-pending";

function pendingPaths(layout: StorageLayout): { dir: string; json: string; snapshot: string } {
  const dir = join(layout.data.node.path, PENDING_DIR);
  return { dir, json: join(dir, "pending.json"), snapshot: join(dir, "snapshot.db") };
}

export function loadPendingRestore(layout: StorageLayout): PendingRestore | undefined {
  const paths = pendingPaths(layout);
  // The JSON is written last: without it, the restore never got this far.
  if (!existsSync(paths.json)) return undefined;
  const json = JSON.parse(readFileSync(paths.json, "utf8"));
  const bytes = (s: string) => new Uint8Array(Buffer.from(s, "base64"));
  return { snapshotFile: paths.snapshot, etcdCA: decodeCAJson(json.etcdCA), joinPublicKey: bytes(json.joinPublicKey), clusterUnlockKey: bytes(json.clusterUnlockKey) };
}

/** Done: the snapshot and what came with it go. */
export function clearPendingRestore(layout: StorageLayout): void {
  rmSync(pendingPaths(layout).dir, { recursive: true, force: true });
}

export interface RestoreOptions {
  ownerPublicKey: Uint8Array;
  snapshot: Uint8Array;
  /** The cluster CA the owner pinned: the snapshot's cluster must have it. */
  caCertificate: X509Certificate;
  layout: StorageLayout;
  storage: DataStorage;
  /** This node's address. */
  address: string;
  /** The etcd and etcdutl binaries that read the snapshot. */
  etcd: string;
  etcdutl: string;
  /** Reads what the snapshot holds (the curator's decoder). */
  snapshotState: SnapshotStateReader;
  /** Deletes the parameters from where they came (the ESP), once the snapshot is safe. */
  forgetParameters: () => Promise<void>;
  logger: Logger;
  signal: AbortSignal;
}

export async function restoreCluster(options: RestoreOptions): Promise<Enrolled> {
  const { layout, logger } = options;
  logger.info("restoring a cluster from a backup: reading its snapshot");
  const state = await readSnapshot({
    etcd: options.etcd,
    etcdutl: options.etcdutl,
    snapshot: options.snapshot,
    scratch: join(layout.ephemeral.path, "restore-read"),
    read: options.snapshotState,
  }).catch((err: unknown) => {
    throw new ParametersError(`the restore's snapshot cannot be read: ${(err as Error).message}`, { cause: err });
  });
  if (!Buffer.from(state.cluster.ownerPublicKey).equals(Buffer.from(options.ownerPublicKey))) {
    throw new ParametersError("the restore's snapshot is of a cluster with another owner key than the parameters name");
  }
  // The snapshot's own CA, not any header's claim: the one the owner pinned, or nothing is restored.
  if (!state.clusterCA.certificate.raw.equals(options.caCertificate.raw)) {
    throw new ParametersError(
      `the restore's snapshot is of a cluster whose CA (${state.clusterCA.certificate.fingerprint256}) is not the one the owner pinned (${options.caCertificate.fingerprint256})`,
    );
  }
  logger.info("snapshot read", { revision: state.revision, nodes: state.nodes.length, ca: state.clusterCA.certificate.fingerprint256 });

  const { credentials, joinPublicKey, clusterUnlockKey } = await becomeFirstMember({ ...options, clusterCA: state.clusterCA });
  const paths = pendingPaths(layout);
  mkdirSync(paths.dir, { recursive: true, mode: 0o700 });
  writeFileDurably(paths.snapshot, options.snapshot, { mode: 0o600 });
  writeFileDurably(
    paths.json,
    JSON.stringify({
      etcdCA: encodeCAJson(state.etcdCA),
      joinPublicKey: Buffer.from(joinPublicKey).toString("base64"),
      clusterUnlockKey: Buffer.from(clusterUnlockKey).toString("base64"),
    }),
    { mode: 0o600 },
  );
  // The parameters hold every key of the cluster in clear: they go as soon
  // as the snapshot is on the encrypted partition.
  await options.forgetParameters();
  logger.info("node credentials and the snapshot saved; the control plane will start the cluster from it", { node: credentials.nodeId });
  return { credentials, clusterUnlockKey };
}
