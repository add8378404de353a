// Backups from the owner's side: take one from the curator leader into a
// file, and check one with the owner's key (internal/backup has the format).
//
// A backup is written to <file>.partial and renamed into place only once
// every byte is on disk, so a cut-off transfer never leaves a file that
// looks like a backup; an existing file is never overwritten.

import { closeSync, existsSync, fsyncSync, openSync, readFileSync, renameSync, rmSync, writeSync } from "node:fs";
import { Management, type BackupSchedule, type BackupStatus, type BackupTaken } from "../../proto/gen/api/management_pb.ts";
import type { X509Certificate } from "node:crypto";
import { BackupFormatError, decryptBackup, readBackupHeader, shownTarget, snapshotIntegrity, verifyBackupSignature, type BackupHeader } from "../backup/mod.ts";
import { formatBytes } from "../log/mod.ts";
import { rawPrivateKey, type KeyPair } from "../pki/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import type { CallSettings } from "./nodes.ts";

/** The deadline of one backup call: the whole snapshot crosses in it. */
export const BACKUP_TIMEOUT_MS = 30 * 60_000;
/** How often progress is said while bytes arrive. */
const PROGRESS_EVERY_MS = 500;

/** Takes a backup into `file`; returns its header and size. */
export async function takeBackup(credentials: OwnerCredentials, settings: CallSettings, file: string, progress: (line: string) => void): Promise<{ header: BackupHeader; bytes: number }> {
  if (existsSync(file)) throw new OperatorError(`${file} exists: a backup never overwrites a file (name another, or move that one away)`);
  const partial = `${file}.partial`;
  try {
    const bytes = await withFailover(
      Management,
      credentials,
      async (m) => {
        // A fresh file for every curator tried: nothing of a failed attempt stays.
        const fd = openSync(partial, "w", 0o600);
        try {
          let written = 0;
          let said = 0;
          for await (const chunk of m.backup({}, { timeoutMs: Math.max(settings.timeoutMs, BACKUP_TIMEOUT_MS) })) {
            writeSync(fd, chunk.data);
            written += chunk.data.length;
            if (performance.now() - said >= PROGRESS_EVERY_MS) {
              said = performance.now();
              progress(`backup: ${formatBytes(Number(chunk.snapshotBytesDone))} of ${formatBytes(Number(chunk.snapshotBytesTotal))} of etcd's snapshot taken, ${formatBytes(written)} written`);
            }
          }
          fsyncSync(fd);
          return written;
        } finally {
          closeSync(fd);
        }
      },
      progress,
    );
    const { header } = readBackupHeader(readFileSync(partial));
    renameSync(partial, file);
    return { header, bytes };
  } catch (err) {
    rmSync(partial, { force: true });
    throw err;
  }
}

/** Which CA a backup must be signed by, and whether an unsigned one may pass. */
export interface BackupTrust {
  /** The cluster CA the owner pinned (ca.crt, or --ca); without one, nothing says whose a backup is. */
  ca?: X509Certificate;
  /** Format 1 (unsigned) backups pass on their header's word: --allow-unsigned. */
  allowUnsigned?: boolean;
}

/**
 * Reads `file` with the owner's key: decrypts every frame, checks etcd's
 * own SHA-256 of the snapshot and that it is an etcd database, and, given
 * the pinned CA, that the cluster signed it (internal/backup
 * verifyBackupSignature). Throws OperatorError with the cause. `signedBy`
 * is the CA's fingerprint when that was proven.
 */
export function checkBackup(file: string, owner: KeyPair, trust: BackupTrust = {}): { header: BackupHeader; databaseBytes: number; signedBy?: string } {
  if (!existsSync(file)) throw new OperatorError(`no backup at ${file}`);
  try {
    const backup = decryptBackup(readFileSync(file), rawPrivateKey(owner.privateKey));
    const { databaseBytes } = snapshotIntegrity(backup.snapshot);
    if (!trust.ca) return { header: backup.header, databaseBytes };
    verifyBackupSignature(backup, trust.ca, trust.allowUnsigned);
    return { header: backup.header, databaseBytes, ...(backup.signature ? { signedBy: trust.ca.fingerprint256 } : {}) };
  } catch (err) {
    if (err instanceof BackupFormatError) throw new OperatorError(`${file}: ${err.message}`);
    throw err;
  }
}

/** A backup's header as lines for people. */
export function describeBackup(header: BackupHeader, extra: string[] = []): string {
  return [
    `cluster CA (SHA-256): ${header.caFingerprint}`,
    `etcd revision: ${header.etcdRevision}`,
    `taken: ${header.createdAt}`,
    `nodes: ${header.nodeCount}`,
    `nodecore version: ${header.nodecoreVersion}`,
    ...extra,
  ].join("\n");
}

/** A backup turned into a restoring node's parameters (ctl params restore). */
export interface RestorePlan {
  header: BackupHeader;
  /** The header as the file holds it: the node checks the signature over it again. */
  headerBytes: Uint8Array;
  /** etcd's snapshot, decrypted: what goes into the parameters. */
  snapshot: Uint8Array;
  /** The cluster CA's signature (absent for an unsigned backup the owner accepted). */
  signature?: Uint8Array;
  /** The CA it was checked against: the restored cluster must have it. */
  ca: X509Certificate;
}

/**
 * Reads `file` with the owner's key, as checkBackup does, for parameters
 * that restore the cluster from it; refuses, with the cause, what a restore
 * would refuse later, and any backup the pinned CA did not sign.
 */
export function readForRestore(file: string, owner: KeyPair, trust: BackupTrust): RestorePlan {
  if (!existsSync(file)) throw new OperatorError(`no backup at ${file}`);
  const ca = trust.ca;
  if (!ca) throw new OperatorError("no pinned cluster CA: a restore needs the CA the backup must be signed by (ca.crt in the config directory, kept from 'ctl takeownership'), or --ca <file>");
  try {
    const backup = decryptBackup(readFileSync(file), rawPrivateKey(owner.privateKey));
    snapshotIntegrity(backup.snapshot);
    verifyBackupSignature(backup, ca, trust.allowUnsigned);
    return { header: backup.header, headerBytes: backup.headerBytes, snapshot: backup.snapshot, ca, ...(backup.signature ? { signature: backup.signature } : {}) };
  } catch (err) {
    if (err instanceof BackupFormatError) throw new OperatorError(`${file}: ${err.message}`);
    throw err;
  }
}

/** What the owner must know before booting a node with restore parameters. */
export function describeRestore(header: BackupHeader): string[] {
  const lines = [`the cluster comes back as it was at etcd revision ${header.etcdRevision} (${header.createdAt}); anything written after that is lost`];
  if (!header.nodes) {
    lines.push(`the backup has ${header.nodeCount} nodes (it is older than the node list in backups: their IDs are not known here)`);
    return lines;
  }
  const consensus = header.nodes.filter((n) => n.consensus && n.address);
  lines.push(`nodes that can join it again with their own disks: ${header.nodes.map((n) => n.id).join(", ") || "none"}`);
  lines.push(`a node enrolled after ${header.createdAt} is not in it, and cannot open its disk`);
  if (consensus.length) {
    lines.push(`boot the restoring node at an address its consensus nodes had (${consensus.map((n) => n.address).join(", ")}): the other nodes look for their curators there`);
  }
  return lines;
}

/** The scheduled backups as `ctl cluster info` shows them: lines for people, and the same as data. */
export function describeBackupSchedule(
  schedule: BackupSchedule | undefined,
  status: BackupStatus | undefined,
): {
  lines: string[];
  everyMinutes: number;
  node: string;
  target?: string;
  last?: BackupTakenSummary;
  lastProven?: BackupTakenSummary;
  lastUploaded?: BackupTakenSummary & { uploadedTo: string };
  lastError?: string;
} {
  if (!schedule || schedule.everyMinutes === 0) return { lines: ["scheduled backups: off (ctl cluster schedule-backups)"], everyMinutes: 0, node: "" };
  const summary = (t: BackupTaken | undefined): BackupTakenSummary | undefined =>
    t ? { file: t.file, time: new Date(Number(t.timeMs)).toISOString(), etcdRevision: Number(t.etcdRevision), bytes: Number(t.bytes) } : undefined;
  const ours = status && status.nodeId === schedule.nodeId ? status : undefined;
  const last = summary(ours?.last);
  const lastProven = summary(ours?.lastVerified);
  const line = (t: BackupTakenSummary | undefined) => (t ? `${t.time}, etcd revision ${t.etcdRevision}, ${formatBytes(t.bytes)} (${t.file})` : "none yet");
  const lastUploaded = summary(ours?.lastUploaded);
  const target = schedule.putUrl ? shownTarget(schedule.putUrl) : undefined;
  const lines = [
    `scheduled backups: every ${schedule.everyMinutes} min by ${schedule.nodeId}, keeping ${schedule.keep}${target ? `, each proven one sent to ${target}` : ""}`,
    `last backup: ${line(last)}`,
    `last proven to restore: ${line(lastProven)}`,
  ];
  if (target) lines.push(`last received by the target: ${lastUploaded ? `${lastUploaded.time}, etcd revision ${lastUploaded.etcdRevision} (${ours!.lastUploaded!.uploadedTo})` : "none yet"}`);
  if (ours?.lastError) lines.push(`last attempt failed (${new Date(Number(ours.lastErrorMs)).toISOString()}): ${ours.lastError}`);
  return {
    lines,
    everyMinutes: schedule.everyMinutes,
    node: schedule.nodeId,
    ...(target ? { target } : {}),
    ...(last ? { last } : {}),
    ...(lastProven ? { lastProven } : {}),
    ...(lastUploaded ? { lastUploaded: { ...lastUploaded, uploadedTo: ours!.lastUploaded!.uploadedTo } } : {}),
    ...(ours?.lastError ? { lastError: ours.lastError } : {}),
  };
}

export interface BackupTakenSummary {
  file: string;
  time: string;
  etcdRevision: number;
  bytes: number;
}
