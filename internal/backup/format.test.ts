// The backup file format: a round trip, and every way a file can be wrong
// refused with its cause, before anything would use it.

import { describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { testCA } from "../testing/mod.ts";
import { BackupFormatError, BackupWriter, CHUNK_BYTES, MAGIC, SIGNED_MAGIC, decryptBackup, readBackupHeader, snapshotIntegrity, verifyBackupSignature } from "./format.ts";

const owner = ed25519.utils.randomSecretKey();
const ca = testCA();
const about = { caFingerprint: ca.certificate.fingerprint256, etcdRevision: 42, createdAt: "2026-11-25T07:00:00.000Z", nodeCount: 3, nodecoreVersion: "test" };
const PAGE = 4096;

/**
 * A stand-in etcd snapshot, as etcd streams it: a "database" of whole
 * pages whose first is a bbolt meta page (magic, version 2, the page size),
 * the rest random, then its SHA-256.
 */
function snapshot(databaseBytes: number): Buffer {
  const database = randomBytes(databaseBytes);
  database.fill(0, 0, 64);
  database.writeUInt16LE(0x04, 8);
  database.writeUInt32LE(0xed0cdaed, 16);
  database.writeUInt32LE(2, 20);
  database.writeUInt32LE(PAGE, 24);
  return Buffer.concat([database, createHash("sha256").update(database).digest()]);
}

/** The file for `plain`, pushed in pieces of `piece` bytes, signed by `signer` (the cluster CA's key). */
function write(plain: Buffer, piece = 10_000, key = ed25519.getPublicKey(owner), signer = ca.privateKey): Buffer {
  const writer = new BackupWriter(key, about, signer);
  const out: Buffer[] = [];
  for (let i = 0; i < plain.length; i += piece) out.push(writer.push(plain.subarray(i, i + piece)));
  out.push(writer.finish());
  return Buffer.concat(out);
}

const refusal = (fn: () => unknown) => {
  try {
    fn();
  } catch (err) {
    expect(err).toBeInstanceOf(BackupFormatError);
    return (err as Error).message;
  }
  throw new Error("not refused");
};

describe("backup files", () => {
  test("round trip: the owner reads back the snapshot and the header, whatever the piece sizes; nobody else can", () => {
    for (const size of [PAGE * 2, CHUNK_BYTES - PAGE, CHUNK_BYTES * 3 + PAGE]) {
      const plain = snapshot(size);
      const file = write(plain, 7_777);
      expect(file.includes(plain.subarray(0, 64))).toBe(false);
      const read = decryptBackup(file, owner);
      const { header, snapshot: back } = read;
      expect(back.equals(plain)).toBe(true);
      verifyBackupSignature(read, ca.certificate);
      expect(header).toMatchObject({ format: 2, ...about, ownerPublicKey: Buffer.from(ed25519.getPublicKey(owner)).toString("base64") });
      expect(snapshotIntegrity(back).databaseBytes).toBe(size);
    }
    // The header reads without a key.
    expect(readBackupHeader(write(snapshot(PAGE))).header.etcdRevision).toBe(42);
    const stranger = ed25519.utils.randomSecretKey();
    expect(refusal(() => decryptBackup(write(snapshot(PAGE)), stranger))).toMatch(/^it is encrypted to another owner key \(/);
  });

  test("a truncated, extended, corrupted or relabelled file is refused with its cause", () => {
    const file = write(snapshot(CHUNK_BYTES * 2 + PAGE));
    const signed = SIGNED_MAGIC.length + 64;
    const frames = file.subarray(0, file.length - signed);
    const { bodyOffset } = readBackupHeader(file);
    expect(refusal(() => decryptBackup(file.subarray(0, 10), owner))).toBe("not a nodecore backup (its first bytes are not NODECORE-BACKUP1)");
    expect(refusal(() => decryptBackup(file.subarray(0, bodyOffset - 5), owner))).toBe("it ends inside its header (truncated)");
    // Cut at a frame boundary: every frame there decrypts, but the last one is missing.
    const firstFrame = bodyOffset + 4 + file.readUInt32BE(bodyOffset);
    // Cut anywhere: the signature that ends the file is missing.
    expect(refusal(() => decryptBackup(file.subarray(0, firstFrame), owner))).toBe("it does not end with its signature (truncated)");
    // Cut with the signature put back after: the frames say what is missing.
    const cut = (end: number) => Buffer.concat([file.subarray(0, end), file.subarray(file.length - signed)]);
    expect(refusal(() => decryptBackup(cut(firstFrame), owner))).toBe("it ends after frame 0, before its last one (truncated)");
    expect(refusal(() => decryptBackup(cut(firstFrame + 100), owner))).toBe("it ends inside frame 1 (truncated)");
    expect(refusal(() => decryptBackup(Buffer.concat([frames, frames.subarray(bodyOffset), file.subarray(file.length - signed)]), owner))).toBe(
      "bytes follow its last frame (frame 2): appended to, or two files joined",
    );
    const flipped = Buffer.from(file);
    flipped[firstFrame + 50]! ^= 1;
    expect(refusal(() => decryptBackup(flipped, owner))).toBe("frame 1 does not decrypt (corrupted, or its header was changed)");
    // Another revision written into the header (same length): every frame's associated data changes.
    const relabelled = Buffer.from(file.toString("latin1").replace('"etcdRevision":42', '"etcdRevision":43'), "latin1");
    expect(refusal(() => decryptBackup(relabelled, owner))).toBe("frame 0 does not decrypt (corrupted, or its header was changed)");
    const garbled = Buffer.from(file);
    garbled.write("}", MAGIC.length + 4, "latin1");
    expect(refusal(() => decryptBackup(garbled, owner))).toBe("its header is not JSON (corrupted)");
    // Valid JSON, but a key that is not one.
    const badKey = Buffer.from(file.toString("latin1").replace(/"ephemeralPublicKey":"(.)/, '"ephemeralPublicKey":"{'), "latin1");
    expect(refusal(() => decryptBackup(badKey, owner))).toBe("its header's ephemeralPublicKey is not a 32-byte key in base64 (corrupted, or crafted)");
  });

  test("a backup is believed only when the pinned CA's key signed it: a forged one (encrypted to the owner by anyone, signed by another CA), a changed one, another cluster's, an unsigned one", () => {
    const plain = snapshot(PAGE * 4);
    // Another cluster's CA signs a file whose header names this cluster's CA: the header's word is not enough.
    const forger = testCA();
    const forged = decryptBackup(write(plain, 10_000, ed25519.getPublicKey(owner), forger.privateKey), owner);
    expect(forged.header.caFingerprint).toBe(ca.certificate.fingerprint256);
    expect(refusal(() => verifyBackupSignature(forged, ca.certificate))).toBe("its signature is not by the pinned cluster CA's key: it was not written by this cluster, or was changed since");
    // The right signature over another snapshot.
    const good = decryptBackup(write(plain), owner);
    const other = snapshot(PAGE * 4);
    expect(refusal(() => verifyBackupSignature({ ...good, snapshot: other }, ca.certificate))).toMatch(/^its signature is not by the pinned cluster CA's key/);
    // Pinned to another cluster's CA.
    expect(refusal(() => verifyBackupSignature(good, forger.certificate))).toBe(
      `it is of another cluster (CA ${ca.certificate.fingerprint256}, the pinned CA is ${forger.certificate.fingerprint256})`,
    );
    // Unsigned (format 1): only with the caller's consent.
    const { signature: _, ...unsigned } = good;
    expect(refusal(() => verifyBackupSignature(unsigned, ca.certificate))).toMatch(/^it is unsigned \(format 1, written before backups were signed\)/);
    verifyBackupSignature(unsigned, ca.certificate, true);
  });

  test("a crafted header is refused field by field, so nothing of it reaches a terminal raw", () => {
    const file = write(snapshot(PAGE));
    const { headerBytes, bodyOffset } = readBackupHeader(file);
    const header = JSON.parse(headerBytes.toString());
    const withHeader = (changes: Record<string, unknown>) => {
      const bytes = Buffer.from(JSON.stringify({ ...header, ...changes }));
      const length = Buffer.alloc(4);
      length.writeUInt32BE(bytes.length);
      return Buffer.concat([Buffer.from(MAGIC), length, bytes, file.subarray(bodyOffset)]);
    };
    const cases: [Record<string, unknown>, string][] = [
      [{ nodecoreVersion: "1.0\u001b]0;owned\u0007" }, "nodecoreVersion is not a version"],
      [{ createdAt: "ctl: restore OK\n" }, "createdAt is not an ISO time"],
      [{ caFingerprint: { toString: 1 } }, "caFingerprint is not a SHA-256 fingerprint (AB:CD:...)"],
      [{ etcdRevision: "42" }, "etcdRevision is not a whole number"],
      [{ nodeCount: -1 }, "nodeCount is not a count of nodes"],
      [{ nodes: [{ id: "node-0000000000000001", address: "10.0.0.1\u001b[2J", consensus: true }] }, "nodes is not a list of nodes (an ID, an address, whether consensus)"],
      [{ format: 3 }, ""],
    ];
    for (const [changes, why] of cases) {
      const message = refusal(() => readBackupHeader(withHeader(changes)));
      expect(message).toBe(why ? `its header's ${why} (corrupted, or crafted)` : "its header is not of format 1 or 2 (corrupted, or a newer format)");
    }
  });

  test("a snapshot whose trailing SHA-256 does not match its database is refused, and so is one that is not an etcd database whatever its SHA-256", () => {
    const plain = snapshot(8_192);
    plain[100]! ^= 1;
    expect(refusal(() => snapshotIntegrity(plain))).toBe("its snapshot's SHA-256 does not match (etcd's snapshot is damaged)");
    expect(refusal(() => snapshotIntegrity(Buffer.alloc(100)))).toMatch(/too short to be an etcd database$/);
    const zeros = Buffer.alloc(8192);
    expect(refusal(() => snapshotIntegrity(Buffer.concat([zeros, createHash("sha256").update(zeros).digest()])))).toBe("its snapshot is not an etcd database: its first page is not a meta page");
    const ragged = snapshot(PAGE * 2).subarray(0, PAGE * 2 - 100);
    const database = ragged;
    expect(refusal(() => snapshotIntegrity(Buffer.concat([database, createHash("sha256").update(database).digest()])))).toBe(
      `its snapshot is not an etcd database: ${PAGE * 2 - 100} bytes, not a whole number of ${PAGE}-byte pages`,
    );
  });
});
