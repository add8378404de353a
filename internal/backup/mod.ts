// Package backup: the cluster's backups. A backup is etcd's snapshot of the
// curator leader's member, encrypted to the owner (format.ts): it holds
// every key of the cluster (the CA's, every node's cluster half of its disk
// key), so only the owner's key reads it, and a damaged, cut-off or foreign
// file is refused with its cause before anything would use it.
//
//   ctl cluster backup FILE ──Management.Backup──▶ curator leader (internal/curator/backup.ts)
//        ◀── file bytes (header, frames) ──────── etcd snapshot → BackupWriter
//   ctl cluster check-backup FILE: decrypts with the owner key, checks the
//        snapshot's own SHA-256, that it is an etcd database, and that the
//        pinned CA (ca.crt) signed it; prints the header (checked field by field)
//
//   ctl params restore BACKUP FILE: checks that the pinned cluster CA signed
//        it (format 2), then the snapshot, decrypted, with that CA, the
//        header and the signature, in a node's parameters; the node checks
//        the signature again, and that the snapshot's CA is that CA;
//        restore.ts reads it through a throwaway etcd member (with the
//        curator's decoder, handed in: the key layout is the curator's) and
//        turns it into the restoring node's etcd data (internal/cluster's
//        flow_restore.ts, internal/roleserve's control plane)
//
//   scheduled backups (internal/roleserve's worker_backups.ts) are written
//        onto a consensus node's data partition, proven by restoring them
//        into a throwaway member, and PUT to the owner's HTTP target (target.ts)

export { readSnapshot, restoreSnapshot, type SnapshotState, type SnapshotStateReader } from "./restore.ts";
export {
  BackupFormatError,
  BackupWriter,
  CHUNK_BYTES,
  MAGIC,
  SIGNED_MAGIC,
  decryptBackup,
  parseBackupHeader,
  readBackupHeader,
  snapshotIntegrity,
  verifyBackupSignature,
  type BackupHeader,
  type DecryptedBackup,
} from "./format.ts";
export { MAX_TARGET_URL_LENGTH, shownTarget, targetFor, targetUrlProblem, uploadBackup } from "./target.ts";
