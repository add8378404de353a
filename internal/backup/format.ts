// The backup file: an etcd snapshot encrypted to the cluster's owner.
//
//   "NODECORE-BACKUP1\n"                       magic, 17 bytes
//   u32 (big-endian) n, n bytes of JSON       the header, in clear: what the file is,
//                                             so that it can be named without the key
//   frames: u32 (big-endian) n, n bytes       AES-256-GCM of CHUNK_BYTES of snapshot each
//
// Only the owner can read it: the key is HKDF-SHA256 of an X25519 agreement
// between a key made for this one file (its public half in the header) and
// the owner's Ed25519 key taken to X25519 (the same key ctl already holds).
// Every frame's associated data is the header's SHA-256 and a byte saying
// whether the frame is the last one, and its nonce counts frames: a header
// changed, frames reordered, dropped or cut off, or a file that ends before
// its last frame, all fail to decrypt, and say which.
//
// The plaintext is etcd's snapshot as etcd streams it: the database file
// followed by its SHA-256, which snapshotIntegrity checks after decryption.

import { createCipheriv, createDecipheriv, createHash, hkdfSync } from "node:crypto";
import { ed25519, x25519 } from "@noble/curves/ed25519.js";

export const MAGIC = "NODECORE-BACKUP1\n";
/** Plaintext bytes per frame. */
export const CHUNK_BYTES = 64 * 1024;
const TAG_BYTES = 16;
/** The largest header a reader accepts (its node list grows with the cluster: about 100 bytes a node). */
const MAX_HEADER_BYTES = 4 * 1024 * 1024;
const INFO = "nodecore backup v1";

/** What a backup says about itself, in clear. */
export interface BackupHeader {
  format: 1;
  /** The cluster CA's SHA-256 fingerprint (as `ctl cluster info` prints it): which cluster. */
  caFingerprint: string;
  /** The owner's Ed25519 public key, base64: who can read it. */
  ownerPublicKey: string;
  /** The etcd revision the snapshot was taken at. */
  etcdRevision: number;
  /** ISO time the snapshot was taken. */
  createdAt: string;
  nodeCount: number;
  /**
   * The nodes at the time, with their addresses and whether they were
   * consensus members: a restore names those that can join it again, and
   * where its node should be (backups before this field lack it).
   */
  nodes?: { id: string; address: string; consensus: boolean }[];
  nodecoreVersion: string;
  /** The X25519 public key made for this file, base64. */
  ephemeralPublicKey: string;
}

/** A backup that cannot be read, with why, in one line. */
export class BackupFormatError extends Error {
  override name = "BackupFormatError";
}

function frameNonce(index: number): Buffer {
  const nonce = Buffer.alloc(12);
  nonce.writeBigUInt64BE(BigInt(index), 4);
  return nonce;
}

function frameAad(headerHash: Buffer, last: boolean): Buffer {
  return Buffer.concat([headerHash, Buffer.of(last ? 1 : 0)]);
}

function fileKey(shared: Uint8Array, ephemeralPublic: Uint8Array, recipient: Uint8Array): Buffer {
  return Buffer.from(hkdfSync("sha256", shared, Buffer.concat([ephemeralPublic, recipient]), INFO, 32));
}

function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n);
  return b;
}

/**
 * Encrypts a snapshot, as it streams, to the owner's Ed25519 public key.
 * push() takes snapshot bytes and returns the file's bytes that are ready;
 * finish() returns the rest. The first bytes returned are the header.
 */
export class BackupWriter {
  private readonly key: Buffer;
  private readonly headerHash: Buffer;
  private pending = Buffer.alloc(0);
  private frames = 0;
  private started = false;
  readonly header: BackupHeader;
  private readonly headerBytes: Buffer;

  constructor(ownerPublicKey: Uint8Array, about: Omit<BackupHeader, "format" | "ownerPublicKey" | "ephemeralPublicKey">) {
    const recipient = ed25519.utils.toMontgomery(ownerPublicKey);
    const ephemeral = x25519.utils.randomSecretKey();
    const ephemeralPublic = x25519.getPublicKey(ephemeral);
    this.key = fileKey(x25519.getSharedSecret(ephemeral, recipient), ephemeralPublic, recipient);
    this.header = { format: 1, ...about, ownerPublicKey: Buffer.from(ownerPublicKey).toString("base64"), ephemeralPublicKey: Buffer.from(ephemeralPublic).toString("base64") };
    this.headerBytes = Buffer.from(JSON.stringify(this.header));
    this.headerHash = createHash("sha256").update(this.headerBytes).digest();
  }

  private frame(plain: Buffer, last: boolean): Buffer {
    const cipher = createCipheriv("aes-256-gcm", this.key, frameNonce(this.frames++));
    cipher.setAAD(frameAad(this.headerHash, last));
    const body = Buffer.concat([cipher.update(plain), cipher.final(), cipher.getAuthTag()]);
    return Buffer.concat([u32(body.length), body]);
  }

  private start(): Buffer[] {
    if (this.started) return [];
    this.started = true;
    return [Buffer.from(MAGIC), u32(this.headerBytes.length), this.headerBytes];
  }

  push(bytes: Uint8Array): Buffer {
    const out = this.start();
    this.pending = Buffer.concat([this.pending, bytes]);
    // Keep at least one byte back: the last frame is only known at finish().
    while (this.pending.length > CHUNK_BYTES) {
      out.push(this.frame(this.pending.subarray(0, CHUNK_BYTES), false));
      this.pending = this.pending.subarray(CHUNK_BYTES);
    }
    return Buffer.concat(out);
  }

  finish(): Buffer {
    const out = this.start();
    out.push(this.frame(this.pending, true));
    this.pending = Buffer.alloc(0);
    return Buffer.concat(out);
  }
}

/** The header of a backup file, read without any key; throws BackupFormatError. */
export function readBackupHeader(file: Uint8Array): { header: BackupHeader; bodyOffset: number; headerBytes: Buffer } {
  const bytes = Buffer.from(file.buffer, file.byteOffset, file.byteLength);
  if (bytes.length < MAGIC.length + 4 || bytes.subarray(0, MAGIC.length).toString("latin1") !== MAGIC) throw new BackupFormatError("not a nodecore backup (its first bytes are not NODECORE-BACKUP1)");
  const length = bytes.readUInt32BE(MAGIC.length);
  if (length > MAX_HEADER_BYTES) throw new BackupFormatError(`its header claims ${length} bytes, more than ${MAX_HEADER_BYTES}`);
  const start = MAGIC.length + 4;
  if (bytes.length < start + length) throw new BackupFormatError("it ends inside its header (truncated)");
  const headerBytes = bytes.subarray(start, start + length);
  let header: BackupHeader;
  try {
    header = JSON.parse(headerBytes.toString("utf8"));
  } catch {
    throw new BackupFormatError("its header is not JSON (corrupted)");
  }
  if (header?.format !== 1 || typeof header.ephemeralPublicKey !== "string" || typeof header.ownerPublicKey !== "string" || typeof header.caFingerprint !== "string") {
    throw new BackupFormatError("its header lacks the fields of format 1 (corrupted, or a newer format)");
  }
  for (const field of ["ephemeralPublicKey", "ownerPublicKey"] as const) {
    if (!/^[A-Za-z0-9+/]{43}=$/.test(header[field])) throw new BackupFormatError(`its header's ${field} is not a 32-byte key in base64 (corrupted)`);
  }
  const nodes: unknown = header.nodes;
  if (nodes !== undefined && (!Array.isArray(nodes) || !nodes.every((n) => typeof n?.id === "string" && typeof n.address === "string" && typeof n.consensus === "boolean"))) {
    throw new BackupFormatError("its header's node list is not a list of nodes (corrupted)");
  }
  return { header, bodyOffset: start + length, headerBytes };
}

/**
 * Decrypts a backup with the owner's Ed25519 private key (32 raw bytes);
 * returns its header and the snapshot. Throws BackupFormatError naming why
 * it cannot: another owner's file, a damaged or truncated one.
 */
export function decryptBackup(file: Uint8Array, ownerPrivateKey: Uint8Array): { header: BackupHeader; snapshot: Buffer } {
  const { header, bodyOffset, headerBytes } = readBackupHeader(file);
  const bytes = Buffer.from(file.buffer, file.byteOffset, file.byteLength);
  const ownerPublic = ed25519.getPublicKey(ownerPrivateKey);
  if (Buffer.from(ownerPublic).toString("base64") !== header.ownerPublicKey) {
    throw new BackupFormatError(`it is encrypted to another owner key (${header.ownerPublicKey}), not to this one (${Buffer.from(ownerPublic).toString("base64")})`);
  }
  const recipient = ed25519.utils.toMontgomery(ownerPublic);
  const ephemeralPublic = Buffer.from(header.ephemeralPublicKey, "base64");
  const key = fileKey(x25519.getSharedSecret(ed25519.utils.toMontgomerySecret(ownerPrivateKey), ephemeralPublic), ephemeralPublic, recipient);
  const headerHash = createHash("sha256").update(headerBytes).digest();
  const parts: Buffer[] = [];
  let offset = bodyOffset;
  for (let index = 0; ; index++) {
    if (offset + 4 > bytes.length) throw new BackupFormatError(`it ends after ${index} frames, before its last one (truncated)`);
    const length = bytes.readUInt32BE(offset);
    if (length < TAG_BYTES || length > CHUNK_BYTES + TAG_BYTES) throw new BackupFormatError(`frame ${index} claims ${length} bytes (corrupted)`);
    if (offset + 4 + length > bytes.length) throw new BackupFormatError(`it ends inside frame ${index} (truncated)`);
    const body = bytes.subarray(offset + 4, offset + 4 + length);
    offset += 4 + length;
    const last = offset === bytes.length;
    const open = (final: boolean) => {
      const decipher = createDecipheriv("aes-256-gcm", key, frameNonce(index));
      decipher.setAAD(frameAad(headerHash, final));
      decipher.setAuthTag(body.subarray(body.length - TAG_BYTES));
      return Buffer.concat([decipher.update(body.subarray(0, body.length - TAG_BYTES)), decipher.final()]);
    };
    try {
      parts.push(open(last));
    } catch {
      // Which way it fails tells a cut-off file from a damaged one.
      let otherWay = false;
      try {
        open(!last);
        otherWay = true;
      } catch {}
      if (otherWay && !last) throw new BackupFormatError(`bytes follow its last frame (frame ${index}): appended to, or two files joined`);
      if (otherWay && last) throw new BackupFormatError(`it ends after frame ${index}, before its last one (truncated)`);
      throw new BackupFormatError(`frame ${index} does not decrypt (corrupted, or its header was changed)`);
    }
    if (last) break;
  }
  return { header, snapshot: Buffer.concat(parts) };
}

/** Checks an etcd snapshot's trailing SHA-256 (etcd appends it to the database it streams). */
export function snapshotIntegrity(snapshot: Uint8Array): { databaseBytes: number } {
  if (snapshot.length < 32 + 4096) throw new BackupFormatError(`its snapshot is ${snapshot.length} bytes, too short to be an etcd database`);
  const database = snapshot.subarray(0, snapshot.length - 32);
  const expected = Buffer.from(snapshot.subarray(snapshot.length - 32));
  if (!createHash("sha256").update(database).digest().equals(expected)) throw new BackupFormatError("its snapshot's SHA-256 does not match (etcd's snapshot is damaged)");
  return { databaseBytes: database.length };
}
