// The scheduled-backups worker: on the consensus node the owner named
// (Management.SetBackupSchedule), takes a backup of its own etcd member
// every so often onto its data partition, proves that it restores, keeps
// the newest, and says how it went.
//
//   every CHECK_INTERVAL_MS, while this node's member serves:
//     schedule (etcd) names this node, and the newest backup is older than
//     its interval? ─▶ room for it (backupRoomProblem: the data partition
//     keeps room for etcd; else a failure naming the free space, nothing
//     written) ─▶ etcd's snapshot of the member, as it streams:
//        encrypted to the owner ─▶ <data>/backups/<time>-r<rev>.backup.partial ─▶ renamed
//        its own bytes ─▶ a scratch file on the ephemeral file system
//     ─▶ proof: the snapshot restores into a throwaway member
//        (internal/backup/restore.ts), holds this cluster's CA and this
//        node's record, and this node's cluster half in it, with its node
//        half from the sealed configuration, opens its data partition
//     ─▶ the owner's HTTP target, if any: the proven file PUT under its name
//        (internal/backup/target.ts); a target that missed one (down, full,
//        or new) gets the newest proven one later, tried again after a while
//     ─▶ the newest `keep` backups stay, and the newest proven one always;
//        a write that failed deletes nothing, and nothing at the target ever
//     ─▶ status: reported to the curator leader (Curator.ReportBackupStatus,
//        which takes it only from the node the schedule names, and writes it
//        fenced; ctl cluster info shows it) and the "backups" service line,
//        failing while the last attempt failed (which makes the node
//        DEGRADED wherever health shows)
//
// What it reads of the cluster (the schedule, the last status, the records,
// the cluster CA that signs the backup) it reads from the local member
// through the curator's read-only view (curator/reader.ts).
//
// The node cannot read the file it wrote (only the owner's key does); it
// proves the snapshot that went into it. `ctl cluster check-backup` proves
// the file.

import { create } from "@bufbuild/protobuf";
import { closeSync, existsSync, fsyncSync, mkdirSync, openSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeSync } from "node:fs";
import { join } from "node:path";
import { BackupStatusSchema, BackupTakenSchema, type BackupSchedule, type BackupStatus, type BackupTaken } from "../../proto/gen/api/management_pb.ts";
import { readSnapshot, shownTarget, targetFor, uploadBackup } from "../backup/mod.ts";
import { dataPartitionKey, type ClusterMembership, type DataStorage } from "../cluster/mod.ts";
import { ETCD_MIN_FREE_BYTES } from "../consensus/mod.ts";
import { backupChunks, curatorSnapshotState, MAX_BACKUP_ERROR_CHARS, type CuratorReader } from "../curator/mod.ts";
import { encodable } from "../rpc/mod.ts";
import type { Value } from "../event/mod.ts";
import { freeSpace, readSealedConfiguration, type StorageLayout } from "../localstorage/mod.ts";
import { sleep, type Runnable } from "../supervisor/mod.ts";
import { VERSION } from "../version/mod.ts";
import type { ServiceBoard } from "./service_status.ts";
import type { LocalConsensus } from "./worker_controlplane.ts";

/** How often the worker looks at the schedule. */
export const CHECK_INTERVAL_MS = 20_000;
const SERVICE = "backups";
const SUFFIX = ".backup";

export interface BackupsOptions {
  layout: StorageLayout;
  membership: Value<ClusterMembership>;
  localConsensus: Value<LocalConsensus | undefined>;
  board: ServiceBoard;
  /** The etcd and etcdutl that the proof restores with. */
  etcd: string;
  etcdutl: () => string;
  /** Tells whether a key opens the node's data (the proof's last step); absent: that step is skipped, and said so. */
  storage?: DataStorage;
  /** Hands the status to the curator leader (Curator.ReportBackupStatus); throws if no curator took it. */
  reportStatus: (status: BackupStatus) => Promise<void>;
}

/** Where the scheduled backups live on the data partition. */
export function backupsDir(layout: StorageLayout): string {
  return join(layout.data.path, "backups");
}

/** The backups in `dir`, newest first. */
export function listBackups(dir: string): { file: string; mtimeMs: number }[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir)
    .filter((name) => name.endsWith(SUFFIX))
    .map((name) => ({ file: join(dir, name), mtimeMs: statSync(join(dir, name)).mtimeMs }))
    .sort((a, b) => b.mtimeMs - a.mtimeMs || b.file.localeCompare(a.file));
}

const mib = (bytes: number) => (bytes / (1024 * 1024)).toFixed(1);

/**
 * Why a backup of a database of `dbBytes` does not fit, or undefined. The
 * data partition takes the encrypted file (about the database's size) and
 * must keep ETCD_MIN_FREE_BYTES (what etcd needs to start) or the
 * database's size free, whichever is more: etcd writes there too, and a
 * partition the backup filled would stop the very member it is a backup of.
 * The ephemeral file system takes the plain copy and the throwaway
 * member the proof restores it into (about twice the database's size).
 */
export function backupRoomProblem(dbBytes: number, free: { data: number; ephemeral: number }): string | undefined {
  const file = Math.ceil(dbBytes * 1.01) + 1024 * 1024;
  const data = file + Math.max(ETCD_MIN_FREE_BYTES, dbBytes);
  if (free.data < data) {
    return `the data partition has ${mib(free.data)} MiB free; a backup of the ${mib(dbBytes)} MiB database needs ${mib(data)} MiB there (the file, and room left for etcd)`;
  }
  const ephemeral = 2 * dbBytes + 16 * 1024 * 1024;
  if (free.ephemeral < ephemeral) {
    return `the ephemeral file system has ${mib(free.ephemeral)} MiB free; proving a backup of the ${mib(dbBytes)} MiB database needs ${mib(ephemeral)} MiB there (its plain copy and a throwaway member)`;
  }
  return undefined;
}

/** The files to delete so that the newest `keep` stay, and `verified` (if any) too. */
export function backupsToPrune(newestFirst: readonly string[], keep: number, verified: string | undefined): string[] {
  return newestFirst.slice(keep).filter((file) => file !== verified);
}

export function backupsWorker(options: BackupsOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const self = membership.credentials.nodeId;
    ctx.signalHealthy();
    let reported = "";
    const retries: UploadRetries = new Map();
    for (;;) {
      const local = options.localConsensus.peek();
      if (local) {
        const store = local.curator;
        const schedule = await store.backupSchedule().catch(() => undefined);
        if (!schedule || schedule.everyMinutes === 0 || schedule.nodeId !== self) {
          if (reported !== "none") options.board.withdraw(SERVICE);
          reported = "none";
        } else {
          const newest = listBackups(backupsDir(options.layout))[0];
          const owed = schedule.putUrl ? await owedToTarget(store, schedule, retries).catch(() => undefined) : undefined;
          if (!newest || Date.now() - newest.mtimeMs >= schedule.everyMinutes * 60_000) {
            await takeScheduledBackup(options, membership, store, schedule, retries, ctx.logger, ctx.signal);
            reported = "done";
          } else if (owed) {
            await resend(options, store, schedule, owed, retries, ctx.logger, ctx.signal);
            reported = "done";
          } else if (reported !== "waiting") {
            const status = await store.backupStatus().catch(() => undefined);
            options.board.report(SERVICE, status?.lastError ? "failing" : "running", describe(schedule, status));
            reported = "waiting";
          }
        }
      }
      await sleep(CHECK_INTERVAL_MS, ctx.signal);
    }
  };
}

function describe(schedule: BackupSchedule, status: BackupStatus | undefined): string {
  const when = (t: BackupTaken | undefined) => (t ? `${new Date(Number(t.timeMs)).toISOString()} (revision ${t.etcdRevision})` : "none");
  const parts = [`every ${schedule.everyMinutes} min, keeping ${schedule.keep}`, `last: ${when(status?.last)}`, `last proven: ${when(status?.lastVerified)}`];
  if (schedule.putUrl) parts.push(`last sent to ${shownTarget(schedule.putUrl)}: ${when(status?.lastUploaded)}`);
  if (status?.lastError) parts.push(`failed: ${status.lastError}`);
  return parts.join("; ");
}

type Logger = { info: (m: string, f?: Record<string, unknown>) => void; warn: (m: string, f?: Record<string, unknown>) => void };

/** When a failed upload of a file to a target may be tried again, by target and file. A new target is tried at once. */
type UploadRetries = Map<string, number>;
/** The least wait before a failed upload is tried again (or the schedule's interval, if shorter). */
export const UPLOAD_RETRY_MS = 5 * 60_000;

/** The newest proven backup, if the schedule's HTTP target has not received it and its retry is due. */
async function owedToTarget(store: CuratorReader, schedule: BackupSchedule, retries: UploadRetries): Promise<BackupTaken | undefined> {
  const status = await store.backupStatus();
  const proven = status?.lastVerified;
  if (!proven || !existsSync(proven.file)) return undefined;
  const to = targetFor(schedule.putUrl, proven.file);
  if (status.lastUploaded?.file === proven.file && status.lastUploaded.uploadedTo === shownTarget(to)) return undefined;
  return (retries.get(to.href) ?? 0) <= Date.now() ? proven : undefined;
}

/** Sends `taken` to the schedule's target, into `status`: lastUploaded on success, lastError otherwise (and when to retry). */
async function send(schedule: BackupSchedule, taken: BackupTaken, status: BackupStatus, retries: UploadRetries, logger: Logger, signal: AbortSignal): Promise<void> {
  const key = targetFor(schedule.putUrl, taken.file).href;
  try {
    const uploadedTo = await uploadBackup(schedule.putUrl, taken.file, signal);
    status.lastUploaded = create(BackupTakenSchema, { ...taken, uploadedTo });
    retries.delete(key);
    logger.info("scheduled backup sent to the target", { to: uploadedTo });
  } catch (err) {
    if (signal.aborted) throw err;
    retries.set(key, Date.now() + Math.min(UPLOAD_RETRY_MS, schedule.everyMinutes * 60_000));
    status.lastError = failureLine(err);
    status.lastErrorMs = BigInt(Date.now());
    logger.warn("a proven backup could not be sent; it stays on this node, and nothing is deleted at the target", { error: status.lastError });
  }
}

/** A proven backup the target missed (it was down, or it is new), sent again. */
async function resend(options: BackupsOptions, store: CuratorReader, schedule: BackupSchedule, proven: BackupTaken, retries: UploadRetries, logger: Logger, signal: AbortSignal): Promise<void> {
  const previous = await store.backupStatus().catch(() => undefined);
  const status = previous ?? create(BackupStatusSchema);
  status.lastError = "";
  status.lastErrorMs = 0n;
  await send(schedule, proven, status, retries, logger, signal);
  await writeStatus(options, status, logger);
  options.board.report(SERVICE, status.lastError ? "failing" : "running", describe(schedule, status));
}

/** One scheduled backup: written, proven, sent, pruned, reported. Never throws for the backup's own failures: they are its status. */
async function takeScheduledBackup(
  options: BackupsOptions,
  membership: ClusterMembership,
  store: CuratorReader,
  schedule: BackupSchedule,
  retries: UploadRetries,
  logger: Logger,
  signal: AbortSignal,
): Promise<void> {
  const previous = await store.backupStatus().catch(() => undefined);
  const status = create(BackupStatusSchema, {
    nodeId: membership.credentials.nodeId,
    ...(previous?.last ? { last: previous.last } : {}),
    ...(previous?.lastVerified ? { lastVerified: previous.lastVerified } : {}),
    ...(previous?.lastUploaded ? { lastUploaded: previous.lastUploaded } : {}),
  });
  const dir = backupsDir(options.layout);
  const scratch = join(options.layout.ephemeral.path, "backup-proof");
  const plainFile = join(options.layout.ephemeral.path, "backup-snapshot.db");
  let partial: string | undefined;
  try {
    const cluster = await store.cluster();
    if (!cluster) throw new Error("etcd holds no cluster record");
    const nodes = await store.nodes();
    const about = {
      caFingerprint: membership.credentials.ca.fingerprint256,
      nodeCount: nodes.length,
      nodes: nodes.map((n) => ({ id: n.id, address: n.status?.externalAddress ?? "", consensus: Boolean(n.roles?.consensusMember) })),
      nodecoreVersion: VERSION,
    };
    // Checked before anything is written: a backup that cannot fit fails with why, and the partition keeps its room.
    const dbBytes = Number((await options.localConsensus.peek()!.member.maintenance.status()).dbSize);
    const noRoom = backupRoomProblem(dbBytes, { data: freeSpace(options.layout.data.path).freeBytes, ephemeral: freeSpace(options.layout.ephemeral.path).freeBytes });
    if (noRoom) throw new Error(noRoom);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    const time = new Date();
    partial = join(dir, `${time.toISOString().replace(/[:.]/g, "-")}.partial`);
    const fd = openSync(partial, "w", 0o600);
    const plain = openSync(plainFile, "w", 0o600);
    let bytes = 0;
    let revision = 0;
    try {
      const { privateKey: signer } = await store.ca("cluster");
      for await (const chunk of backupChunks(options.localConsensus.peek()!.member, cluster.ownerPublicKey, about, signer, signal, (blob) => writeSync(plain, blob))) {
        writeSync(fd, chunk.data);
        bytes += chunk.data.length;
        revision = chunk.etcdRevision;
      }
      fsyncSync(fd);
    } finally {
      closeSync(fd);
      closeSync(plain);
    }
    const file = join(dir, `${time.toISOString().replace(/[:.]/g, "-")}-r${revision}${SUFFIX}`);
    renameSync(partial, file);
    partial = undefined;
    const taken = create(BackupTakenSchema, { file, timeMs: BigInt(time.getTime()), etcdRevision: BigInt(revision), bytes: BigInt(bytes) });
    status.last = taken;
    logger.info("scheduled backup written", { file, bytes, revision });

    const proof = await proveSnapshot(options, membership, readFileSync(plainFile), scratch);
    status.lastVerified = taken;
    logger.info("scheduled backup proven: it restores", { file, ...proof });
    if (schedule.putUrl) await send(schedule, taken, status, retries, logger, signal);
  } catch (err) {
    status.lastError = failureLine(err);
    status.lastErrorMs = BigInt(Date.now());
    logger.warn("scheduled backup failed; the older proven one stays", { error: status.lastError });
  } finally {
    if (partial) rmSync(partial, { force: true });
    rmSync(plainFile, { force: true });
  }
  // Only a backup that was written makes room: a failed write (a full disk) deletes nothing.
  if (status.last && status.last !== previous?.last) {
    for (const file of backupsToPrune(
      listBackups(dir).map((b) => b.file),
      schedule.keep,
      status.lastVerified?.file,
    ))
      rmSync(file, { force: true });
  }
  await writeStatus(options, status, logger);
  options.board.report(SERVICE, status.lastError ? "failing" : "running", describe(schedule, status));
}

/**
 * Restores `snapshot` into a throwaway member and checks it is this
 * cluster's: its CA, this node's record, and this node's cluster half,
 * which with the node half must open its data. Throws, naming what failed.
 */
export async function proveSnapshot(
  options: Pick<BackupsOptions, "etcd" | "etcdutl" | "storage" | "layout">,
  membership: Pick<ClusterMembership, "credentials">,
  snapshot: Uint8Array,
  scratch: string,
): Promise<{ nodes: number; revision: number }> {
  const state = await readSnapshot({ etcd: options.etcd, etcdutl: options.etcdutl(), snapshot, scratch, read: curatorSnapshotState });
  const ca = membership.credentials.ca.fingerprint256;
  if (state.clusterCA.certificate.fingerprint256 !== ca) throw new Error(`the backup's CA is ${state.clusterCA.certificate.fingerprint256}, not this cluster's ${ca}`);
  const self = state.nodes.find((n) => n.id === membership.credentials.nodeId);
  if (!self) throw new Error(`the backup has no record of ${membership.credentials.nodeId}, the node that took it`);
  if (options.storage?.opens) {
    const sealed = readSealedConfiguration(options.layout.esp.sealed);
    if (!sealed) throw new Error("this node has no sealed configuration to take its node half from");
    if (!(await options.storage.opens(dataPartitionKey(sealed.nodeUnlockKey, self.clusterUnlockKey)))) {
      throw new Error("this node's cluster half in the backup does not open its data partition");
    }
  }
  return { nodes: state.nodes.length, revision: state.revision };
}

/** A failure's first line as the status carries it: printable, and within what the curator takes. */
function failureLine(err: unknown): string {
  // Escapes may lengthen what is cut to fit; the last slice keeps it within the bound.
  return encodable((err as Error).message.split("\n")[0] ?? "", MAX_BACKUP_ERROR_CHARS - 100).slice(0, MAX_BACKUP_ERROR_CHARS);
}

/** The status to the curator leader; a failure to hand it over is logged (the next attempt reports again). */
async function writeStatus(options: BackupsOptions, status: BackupStatus, logger: Logger): Promise<void> {
  await options.reportStatus(status).catch((err: unknown) => logger.warn("could not report the backup status to the curator", { error: (err as Error).message }));
}
