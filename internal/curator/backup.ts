// Management.Backup on the curator leader: etcd's snapshot of the leader's
// own member, encrypted to the owner as it streams (internal/backup), so
// that no byte of it leaves the node in clear.
//
//   maintenance.snapshot() ──blob, remaining──▶ BackupWriter(owner key, header, CA key) ──file bytes──▶ caller
//   (encrypted to the owner, signed by the cluster CA's key at its end)
//
// The header is written once the first snapshot message has named the
// revision it was taken at. The snapshot is read no faster than the caller
// takes the file: etcd's stream is paused while a chunk waits.

import type { EtcdMember } from "../consensus/mod.ts";
import type { KeyObject } from "node:crypto";
import { BackupWriter, type BackupHeader } from "../backup/mod.ts";

/** What the backup's header says besides the keys and the revision. */
export type BackupAbout = Pick<BackupHeader, "caFingerprint" | "nodeCount" | "nodes" | "nodecoreVersion">;

interface SnapshotMessage {
  header: { revision: string };
  remaining_bytes: string;
  blob: Buffer;
}

/** The snapshot's messages as an async iterable, pausing etcd's stream while none is taken. */
async function* snapshotMessages(etcd: EtcdMember, signal: AbortSignal): AsyncGenerator<SnapshotMessage> {
  const stream = (await etcd.maintenance.snapshot()) as unknown as {
    on(event: string, fn: (arg: never) => void): unknown;
    pause?: () => void;
    resume?: () => void;
    cancel?: () => void;
  };
  const queue: SnapshotMessage[] = [];
  let ended = false;
  let failed: Error | undefined;
  let wake: (() => void) | undefined;
  const notify = () => {
    wake?.();
    wake = undefined;
  };
  stream.on("data", (message: SnapshotMessage) => {
    queue.push(message);
    if (queue.length >= 4) stream.pause?.();
    notify();
  });
  stream.on("end", () => {
    ended = true;
    notify();
  });
  stream.on("error", (err: Error) => {
    failed = err;
    notify();
  });
  const onAbort = () => {
    stream.cancel?.();
    notify();
  };
  signal.addEventListener("abort", onAbort, { once: true });
  try {
    for (;;) {
      signal.throwIfAborted();
      const next = queue.shift();
      if (next) {
        if (queue.length < 2) stream.resume?.();
        yield next;
        continue;
      }
      if (failed) throw new Error(`etcd's snapshot failed: ${failed.message}`);
      if (ended) return;
      await new Promise<void>((resolve) => (wake = resolve));
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    if (!ended) stream.cancel?.();
  }
}

/** The backup file's bytes, with the snapshot's progress, as etcd streams its snapshot. */
export async function* backupChunks(
  etcd: EtcdMember,
  ownerPublicKey: Uint8Array,
  about: BackupAbout,
  /** The cluster CA's private key: the file is signed with it (internal/backup format 2). */
  signer: KeyObject,
  signal: AbortSignal,
  /** Gets the snapshot's own bytes as they pass (a scheduled backup keeps them to prove they restore). */
  tee?: (plain: Uint8Array) => void,
): AsyncGenerator<{ data: Uint8Array; snapshotBytesDone: bigint; snapshotBytesTotal: bigint; etcdRevision: number }> {
  // etcd 3.6 names the snapshot's revision in its first message; older
  // members send none, and then the revision just before it stands in (the
  // snapshot holds at least that one).
  const before = Number((await etcd.maintenance.status()).header.revision);
  let writer: BackupWriter | undefined;
  let done = 0n;
  let total = 0n;
  for await (const message of snapshotMessages(etcd, signal)) {
    writer ??= new BackupWriter(ownerPublicKey, { ...about, etcdRevision: Number(message.header?.revision ?? 0) || before, createdAt: new Date().toISOString() }, signer);
    done += BigInt(message.blob.length);
    total = done + BigInt(message.remaining_bytes ?? 0);
    tee?.(message.blob);
    const data = writer.push(message.blob);
    if (data.length) yield { data, snapshotBytesDone: done, snapshotBytesTotal: total, etcdRevision: writer.header.etcdRevision };
  }
  if (!writer) throw new Error("etcd's snapshot stream ended before it sent anything");
  yield { data: writer.finish(), snapshotBytesDone: done, snapshotBytesTotal: total, etcdRevision: writer.header.etcdRevision };
}
