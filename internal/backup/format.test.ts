// The backup file format: a round trip, and every way a file can be wrong
// refused with its cause, before anything would use it.

import { describe, expect, test } from "bun:test";
import { createHash, randomBytes } from "node:crypto";
import { ed25519 } from "@noble/curves/ed25519.js";
import { BackupFormatError, BackupWriter, CHUNK_BYTES, MAGIC, decryptBackup, readBackupHeader, snapshotIntegrity } from "./format.ts";

const owner = ed25519.utils.randomSecretKey();
const about = { caFingerprint: "AA:BB", etcdRevision: 42, createdAt: "2026-11-25T07:00:00.000Z", nodeCount: 3, nodecoreVersion: "test" };

/** A stand-in etcd snapshot: random "database" bytes and their SHA-256, as etcd streams them. */
function snapshot(databaseBytes: number): Buffer {
  const database = randomBytes(databaseBytes);
  return Buffer.concat([database, createHash("sha256").update(database).digest()]);
}

/** The file for `plain`, pushed in pieces of `piece` bytes. */
function write(plain: Buffer, piece = 10_000, key = ed25519.getPublicKey(owner)): Buffer {
  const writer = new BackupWriter(key, about);
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
    for (const size of [5_000, CHUNK_BYTES - 32, CHUNK_BYTES * 3 + 7]) {
      const plain = snapshot(size);
      const file = write(plain, 7_777);
      expect(file.includes(plain.subarray(0, 64))).toBe(false);
      const { header, snapshot: back } = decryptBackup(file, owner);
      expect(back.equals(plain)).toBe(true);
      expect(header).toMatchObject({ format: 1, ...about, ownerPublicKey: Buffer.from(ed25519.getPublicKey(owner)).toString("base64") });
      expect(snapshotIntegrity(back).databaseBytes).toBe(size);
    }
    // The header reads without a key.
    expect(readBackupHeader(write(snapshot(5_000))).header.etcdRevision).toBe(42);
    const stranger = ed25519.utils.randomSecretKey();
    expect(refusal(() => decryptBackup(write(snapshot(5_000)), stranger))).toMatch(/^it is encrypted to another owner key \(/);
  });

  test("a truncated, extended, corrupted or relabelled file is refused with its cause", () => {
    const file = write(snapshot(CHUNK_BYTES * 2 + 100));
    const { bodyOffset } = readBackupHeader(file);
    expect(refusal(() => decryptBackup(file.subarray(0, 10), owner))).toBe("not a nodecore backup (its first bytes are not NODECORE-BACKUP1)");
    expect(refusal(() => decryptBackup(file.subarray(0, bodyOffset - 5), owner))).toBe("it ends inside its header (truncated)");
    // Cut at a frame boundary: every frame there decrypts, but the last one is missing.
    const firstFrame = bodyOffset + 4 + file.readUInt32BE(bodyOffset);
    expect(refusal(() => decryptBackup(file.subarray(0, firstFrame), owner))).toBe("it ends after frame 0, before its last one (truncated)");
    expect(refusal(() => decryptBackup(file.subarray(0, firstFrame + 100), owner))).toBe("it ends inside frame 1 (truncated)");
    expect(refusal(() => decryptBackup(Buffer.concat([file, file.subarray(bodyOffset)]), owner))).toBe("bytes follow its last frame (frame 2): appended to, or two files joined");
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
    expect(refusal(() => decryptBackup(badKey, owner))).toBe("its header's ephemeralPublicKey is not a 32-byte key in base64 (corrupted)");
  });

  test("a snapshot whose trailing SHA-256 does not match its database is refused", () => {
    const plain = snapshot(8_192);
    plain[100]! ^= 1;
    expect(refusal(() => snapshotIntegrity(plain))).toBe("its snapshot's SHA-256 does not match (etcd's snapshot is damaged)");
    expect(refusal(() => snapshotIntegrity(Buffer.alloc(100)))).toMatch(/too short to be an etcd database$/);
  });
});
