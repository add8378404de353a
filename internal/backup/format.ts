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
// followed by its SHA-256, which snapshotIntegrity checks after decryption
// (and that it is an etcd database: bbolt's first meta page).
//
// Format 2 is signed by the cluster. Anyone with the owner's public key
// can encrypt a file to it, so encryption says nothing of who wrote it:
//
//   ... frames ... | signature, 64 bytes | "NODECORE-SIGNED1\n"
//
// The signature is Ed25519, by the cluster CA's key, over SIGNATURE_CONTEXT,
// the header's SHA-256 and the snapshot's SHA-256 (verifyBackupSignature).
// A reader holding the CA it trusts (the owner's pinned ca.crt) believes
// the header and the snapshot only once the signature verifies with that
// CA's key. Format 1 files have no signature and are read only when the
// caller says it accepts that (ctl --allow-unsigned).
//
// Every header field is checked for its type and its characters when read
// (readBackupHeader): nothing of a crafted header reaches a terminal raw.

import { createCipheriv, createDecipheriv, createHash, hkdfSync, sign, verify, type KeyObject, type X509Certificate } from "node:crypto";
import { ed25519, x25519 } from "@noble/curves/ed25519.js";

export const MAGIC = "NODECORE-BACKUP1\n";
/** The last bytes of a signed (format 2) file. */
export const SIGNED_MAGIC = "NODECORE-SIGNED1\n";
const SIGNATURE_BYTES = 64;
/** What a backup signature is over, before the two hashes. */
const SIGNATURE_CONTEXT = "nodecore backup signature v1\n";
/** Plaintext bytes per frame. */
export const CHUNK_BYTES = 64 * 1024;
const TAG_BYTES = 16;
/** The largest header a reader accepts (its node list grows with the cluster: about 100 bytes a node). */
const MAX_HEADER_BYTES = 4 * 1024 * 1024;
const INFO = "nodecore backup v1";

/** What a backup says about itself, in clear. */
export interface BackupHeader {
  /** 2: signed by the cluster CA (written since); 1: unsigned. */
  format: 1 | 2;
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
  private readonly snapshotHash = createHash("sha256");

  /** `signer`: the cluster CA's private key (Ed25519), which signs the file (format 2). */
  constructor(
    ownerPublicKey: Uint8Array,
    about: Omit<BackupHeader, "format" | "ownerPublicKey" | "ephemeralPublicKey">,
    private readonly signer: KeyObject,
  ) {
    const recipient = ed25519.utils.toMontgomery(ownerPublicKey);
    const ephemeral = x25519.utils.randomSecretKey();
    const ephemeralPublic = x25519.getPublicKey(ephemeral);
    this.key = fileKey(x25519.getSharedSecret(ephemeral, recipient), ephemeralPublic, recipient);
    this.header = { format: 2, ...about, ownerPublicKey: Buffer.from(ownerPublicKey).toString("base64"), ephemeralPublicKey: Buffer.from(ephemeralPublic).toString("base64") };
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
    this.snapshotHash.update(bytes);
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
    out.push(sign(null, signedMessage(this.headerBytes, this.snapshotHash.digest()), this.signer), Buffer.from(SIGNED_MAGIC));
    return Buffer.concat(out);
  }
}

const KEY_BASE64 = /^[A-Za-z0-9+/]{43}=$/;
const FINGERPRINT = /^[0-9A-F]{2}(:[0-9A-F]{2}){31}$/;
const ISO_TIME = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,9})?Z$/;
const NODE_ID = /^node-[0-9a-f]{16}$/;
/** An address as a node record holds it: IPv4 or IPv6 characters, or none. */
const ADDRESS = /^[0-9A-Fa-f.:]{0,45}$/;
const VERSION_TEXT = /^[0-9A-Za-z.+\-_]{1,64}$/;
/** The most nodes a header may list. */
const MAX_HEADER_NODES = 100_000;

/**
 * A parsed header, checked field by field: each has its type, and strings
 * only the characters they can have, so that what is printed of a header
 * is what a backup writes (never a terminal's escape). Throws
 * BackupFormatError naming the first field that is not so.
 */
function checkHeader(parsed: unknown): BackupHeader {
  if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) throw new BackupFormatError("its header is not a JSON object (corrupted)");
  const h = parsed as Record<string, unknown>;
  if (h.format !== 1 && h.format !== 2) throw new BackupFormatError("its header is not of format 1 or 2 (corrupted, or a newer format)");
  const bad = (field: string, what: string) => new BackupFormatError(`its header's ${field} is not ${what} (corrupted, or crafted)`);
  for (const field of ["ephemeralPublicKey", "ownerPublicKey"] as const) {
    if (typeof h[field] !== "string" || !KEY_BASE64.test(h[field])) throw bad(field, "a 32-byte key in base64");
  }
  if (typeof h.caFingerprint !== "string" || !FINGERPRINT.test(h.caFingerprint)) throw bad("caFingerprint", "a SHA-256 fingerprint (AB:CD:...)");
  if (!Number.isSafeInteger(h.etcdRevision) || (h.etcdRevision as number) < 0) throw bad("etcdRevision", "a whole number");
  if (typeof h.createdAt !== "string" || !ISO_TIME.test(h.createdAt)) throw bad("createdAt", "an ISO time");
  if (!Number.isSafeInteger(h.nodeCount) || (h.nodeCount as number) < 0 || (h.nodeCount as number) > MAX_HEADER_NODES) throw bad("nodeCount", "a count of nodes");
  if (typeof h.nodecoreVersion !== "string" || !VERSION_TEXT.test(h.nodecoreVersion)) throw bad("nodecoreVersion", "a version");
  const nodes = h.nodes;
  if (nodes !== undefined) {
    if (!Array.isArray(nodes) || nodes.length > MAX_HEADER_NODES) throw bad("nodes", "a list of nodes");
    for (const n of nodes as unknown[]) {
      const node = n as Record<string, unknown> | null;
      if (
        !node ||
        typeof node !== "object" ||
        typeof node.id !== "string" ||
        !NODE_ID.test(node.id) ||
        typeof node.address !== "string" ||
        !ADDRESS.test(node.address) ||
        typeof node.consensus !== "boolean"
      ) {
        throw bad("nodes", "a list of nodes (an ID, an address, whether consensus)");
      }
    }
  }
  return parsed as BackupHeader;
}

/** A header's bytes as a backup file holds them, checked (a restoring node gets them in its parameters). */
export function parseBackupHeader(headerBytes: Uint8Array): BackupHeader {
  let parsed: unknown;
  try {
    parsed = JSON.parse(Buffer.from(headerBytes).toString("utf8"));
  } catch {
    throw new BackupFormatError("its header is not JSON (corrupted)");
  }
  return checkHeader(parsed);
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
  const header = parseBackupHeader(headerBytes);
  return { header, bodyOffset: start + length, headerBytes };
}

/**
 * Decrypts a backup with the owner's Ed25519 private key (32 raw bytes);
 * returns its header and the snapshot. Throws BackupFormatError naming why
 * it cannot: another owner's file, a damaged or truncated one.
 */
export function decryptBackup(file: Uint8Array, ownerPrivateKey: Uint8Array): DecryptedBackup {
  const { header, bodyOffset, headerBytes } = readBackupHeader(file);
  let bytes = Buffer.from(file.buffer, file.byteOffset, file.byteLength);
  let signature: Buffer | undefined;
  if (header.format === 2) {
    // The signature and its magic end the file: the frames end before them.
    const end = bytes.length - SIGNED_MAGIC.length;
    if (end - SIGNATURE_BYTES < bodyOffset || bytes.subarray(end).toString("latin1") !== SIGNED_MAGIC) throw new BackupFormatError("it does not end with its signature (truncated)");
    signature = Buffer.from(bytes.subarray(end - SIGNATURE_BYTES, end));
    bytes = bytes.subarray(0, end - SIGNATURE_BYTES);
  }
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
  return { header, headerBytes, snapshot: Buffer.concat(parts), ...(signature ? { signature } : {}) };
}

/** A backup read with the owner's key: believe none of it before verifyBackupSignature. */
export interface DecryptedBackup {
  header: BackupHeader;
  headerBytes: Buffer;
  snapshot: Buffer;
  /** Format 2's signature; absent in format 1. */
  signature?: Buffer;
}

function signedMessage(headerBytes: Uint8Array, snapshotSha256: Uint8Array): Buffer {
  return Buffer.concat([Buffer.from(SIGNATURE_CONTEXT), createHash("sha256").update(headerBytes).digest(), snapshotSha256]);
}

/**
 * Whether `backup` is the cluster's whose CA is `ca` (the owner's pinned
 * ca.crt): its header names that CA, and its signature verifies with that
 * CA's key over its header and its snapshot. Throws BackupFormatError with
 * the cause. An unsigned (format 1) backup is refused unless
 * `allowUnsigned`: then only its header's word says whose it is.
 */
export function verifyBackupSignature(backup: Pick<DecryptedBackup, "header" | "headerBytes" | "snapshot" | "signature">, ca: X509Certificate, allowUnsigned = false): void {
  const { header } = backup;
  if (header.caFingerprint !== ca.fingerprint256) throw new BackupFormatError(`it is of another cluster (CA ${header.caFingerprint}, the pinned CA is ${ca.fingerprint256})`);
  if (!backup.signature) {
    if (allowUnsigned) return;
    throw new BackupFormatError("it is unsigned (format 1, written before backups were signed): nothing proves which cluster wrote it; accept that with --allow-unsigned");
  }
  const message = signedMessage(backup.headerBytes, createHash("sha256").update(backup.snapshot).digest());
  let good = false;
  try {
    good = verify(null, message, ca.publicKey, backup.signature);
  } catch {
    good = false;
  }
  if (!good) throw new BackupFormatError("its signature is not by the pinned cluster CA's key: it was not written by this cluster, or was changed since");
}

/** Checks an etcd snapshot's trailing SHA-256 (etcd appends it to the database it streams). */
export function snapshotIntegrity(snapshot: Uint8Array): { databaseBytes: number } {
  if (snapshot.length < 32 + 4096) throw new BackupFormatError(`its snapshot is ${snapshot.length} bytes, too short to be an etcd database`);
  const database = snapshot.subarray(0, snapshot.length - 32);
  const expected = Buffer.from(snapshot.subarray(snapshot.length - 32));
  if (!createHash("sha256").update(database).digest().equals(expected)) throw new BackupFormatError("its snapshot's SHA-256 does not match (etcd's snapshot is damaged)");
  const problem = boltProblem(database);
  if (problem) throw new BackupFormatError(`its snapshot is not an etcd database: ${problem}`);
  return { databaseBytes: database.length };
}

/** bbolt's meta page magic, and the version etcd's databases have. */
const BOLT_MAGIC = 0xed0cdaed;
const BOLT_VERSION = 2;
const BOLT_META_PAGE = 0x04;

/**
 * Why `database` is not a bbolt file (etcd's database), or undefined: its
 * first page must be a meta page with bbolt's magic and version, a page
 * size that is a power of two from 1 KiB to 64 KiB, and a length that is a
 * whole number of pages.
 */
function boltProblem(database: Uint8Array): string | undefined {
  const b = Buffer.from(database.buffer, database.byteOffset, database.byteLength);
  if (b.length < 64) return "shorter than a page";
  // Page header: id u64, flags u16, count u16, overflow u32; then the meta: magic u32, version u32, page size u32 (little-endian).
  if ((b.readUInt16LE(8) & BOLT_META_PAGE) === 0) return "its first page is not a meta page";
  if (b.readUInt32LE(16) !== BOLT_MAGIC) return "no bbolt magic in its first page";
  if (b.readUInt32LE(20) !== BOLT_VERSION) return `bbolt version ${b.readUInt32LE(20)}, not ${BOLT_VERSION}`;
  const pageSize = b.readUInt32LE(24);
  if (pageSize < 1024 || pageSize > 65536 || (pageSize & (pageSize - 1)) !== 0) return `a page size of ${pageSize}`;
  if (b.length % pageSize !== 0) return `${b.length} bytes, not a whole number of ${pageSize}-byte pages`;
  return undefined;
}
