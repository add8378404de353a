// Package backup: the cluster's backups. A backup is etcd's snapshot of the
// curator leader's member, encrypted to the owner (format.ts): it holds
// every key of the cluster (the CA's, every node's cluster half of its disk
// key), so only the owner's key reads it, and a damaged, cut-off or foreign
// file is refused with its cause before anything would use it.
//
//   ctl cluster backup FILE ──Management.Backup──▶ curator leader (internal/curator/backup.ts)
//        ◀── file bytes (header, frames) ──────── etcd snapshot → BackupWriter
//   ctl cluster backup-check FILE: decrypts with the owner key, checks the
//        snapshot's own SHA-256, and prints the header
//
// Still to come (issue 30): scheduled backups, verification by restoring
// into a throwaway node, restore and recover.

export { BackupFormatError, BackupWriter, CHUNK_BYTES, MAGIC, decryptBackup, readBackupHeader, snapshotIntegrity, type BackupHeader } from "./format.ts";
