// Splitting a consensus member's cluster half into shares, and making it
// whole again. Two layers of AES-256-GCM around each Shamir share:
//
//   cluster half ──split (shamir-secret-sharing, t of n)──▶ share i
//     ShareBody{split id, epoch, t, n, share i, key check}
//       ──AEAD under the owner's wrap key──▶ WrappedShare      (inner: only the owner opens it)
//       ──X25519 to holder i's join key──▶ SealedShare          (outer: only holder i opens it)
//
// The owner's wrap key comes from its node unlock key, which is on the
// owner's ESP, so before its data is unlocked the owner can open what the
// holders send back, and nobody else can: a holder returns WrappedShares,
// never a bare share. The associated data of both layers names the owner and
// the holder, so a share handed back by the wrong holder, for the wrong
// node, or altered on the way is refused, never silently combined. Shares of
// different splits (split id) are never mixed, and the combined result is
// checked against the key check before it is used.
//
// The field arithmetic is the audited library's; nothing here computes in
// GF(2^8). With a threshold of 1 there is nothing to split (Shamir's scheme
// needs t ≥ 2): every holder's share is the cluster half itself, still under
// both layers.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ed25519, x25519 } from "@noble/curves/ed25519.js";
import { createCipheriv, createDecipheriv, createHash, hkdfSync, randomBytes, timingSafeEqual } from "node:crypto";
import { combine, split } from "shamir-secret-sharing";
import { SealedShareSchema, ShareBodySchema, WrappedShareSchema, type ShareBody, type WrappedShare } from "../../proto/gen/coldstart/coldstart_pb.ts";
import { MAX_UNLOCK_SHARE_THRESHOLD } from "./threshold.ts";

const WRAP_KEY_INFO = "nodecore unlock share wrap v1";
const HOLDER_KEY_INFO = "nodecore unlock share to holder v1";
const KEY_CHECK_CONTEXT = "nodecore cluster half check v1";
const NONCE_BYTES = 12;
const TAG_BYTES = 16;
const SPLIT_ID_BYTES = 16;
const KEY_CHECK_BYTES = 16;
/** The most holders a split can have (the library's limit). */
export const MAX_HOLDERS = MAX_UNLOCK_SHARE_THRESHOLD;
/** No sealed share is larger than this (a 32-byte key in two layers is about 200 bytes). */
export const MAX_SEALED_SHARE_BYTES = 1024;

/** A share that cannot be opened or does not belong: wrong holder, wrong node, altered, or from another split. */
export class ShareError extends Error {
  override name = "ShareError";
}

export interface Holder {
  id: string;
  /** The holder's Ed25519 join public key (from the cluster's records). */
  joinKey: Uint8Array;
}

function associatedData(layer: string, owner: string, holder: string): Buffer {
  return Buffer.from(`${layer}\0owner=${owner}\0holder=${holder}`);
}

function seal(key: Uint8Array, plaintext: Uint8Array, aad: Uint8Array): { nonce: Uint8Array; ciphertext: Uint8Array } {
  const nonce = randomBytes(NONCE_BYTES);
  const cipher = createCipheriv("aes-256-gcm", key, nonce);
  cipher.setAAD(aad);
  const body = Buffer.concat([cipher.update(plaintext), cipher.final(), cipher.getAuthTag()]);
  return { nonce: new Uint8Array(nonce), ciphertext: new Uint8Array(body) };
}

function open(key: Uint8Array, nonce: Uint8Array, ciphertext: Uint8Array, aad: Uint8Array, what: string): Uint8Array {
  if (nonce.length !== NONCE_BYTES || ciphertext.length < TAG_BYTES) throw new ShareError(`${what}: malformed (nonce or ciphertext too short)`);
  try {
    const decipher = createDecipheriv("aes-256-gcm", key, nonce);
    decipher.setAAD(aad);
    decipher.setAuthTag(ciphertext.subarray(ciphertext.length - TAG_BYTES));
    return new Uint8Array(Buffer.concat([decipher.update(ciphertext.subarray(0, ciphertext.length - TAG_BYTES)), decipher.final()]));
  } catch {
    throw new ShareError(`${what}: does not open (made for another node or holder, or altered)`);
  }
}

/** The owner's inner-layer key, from its node unlock key. */
function wrapKey(nodeUnlockKey: Uint8Array): Uint8Array {
  return new Uint8Array(hkdfSync("sha256", nodeUnlockKey, new Uint8Array(0), WRAP_KEY_INFO, 32));
}

function holderKey(shared: Uint8Array, ephemeralPublic: Uint8Array, holderPublic: Uint8Array): Uint8Array {
  return new Uint8Array(hkdfSync("sha256", shared, Buffer.concat([ephemeralPublic, holderPublic]), HOLDER_KEY_INFO, 32));
}

export function keyCheck(clusterHalf: Uint8Array): Uint8Array {
  return new Uint8Array(createHash("sha256").update(KEY_CHECK_CONTEXT).update(clusterHalf).digest().subarray(0, KEY_CHECK_BYTES));
}

/** Encrypts `plaintext` so that only the holder of `joinKey`'s private half can read it. */
export function sealToHolder(joinKey: Uint8Array, owner: string, holder: string, plaintext: Uint8Array): Uint8Array {
  const holderPublic = ed25519.utils.toMontgomery(joinKey);
  const ephemeral = x25519.utils.randomSecretKey();
  const ephemeralPublic = x25519.getPublicKey(ephemeral);
  const key = holderKey(x25519.getSharedSecret(ephemeral, holderPublic), ephemeralPublic, holderPublic);
  const { nonce, ciphertext } = seal(key, plaintext, associatedData("sealed", owner, holder));
  return toBinary(SealedShareSchema, create(SealedShareSchema, { ephemeralPublicKey: ephemeralPublic, nonce, ciphertext }));
}

/** The holder's side of sealToHolder: `joinSeed` is the holder's join key seed (on its ESP). */
export function openAsHolder(joinSeed: Uint8Array, owner: string, holder: string, sealed: Uint8Array): Uint8Array {
  if (sealed.length > MAX_SEALED_SHARE_BYTES) throw new ShareError(`sealed share: ${sealed.length} bytes, more than ${MAX_SEALED_SHARE_BYTES}`);
  let message;
  try {
    message = fromBinary(SealedShareSchema, sealed);
  } catch {
    throw new ShareError("sealed share: not a SealedShare message");
  }
  if (message.ephemeralPublicKey.length !== 32) throw new ShareError("sealed share: the ephemeral key is not 32 bytes");
  const holderPublic = ed25519.utils.toMontgomery(ed25519.getPublicKey(joinSeed));
  let shared: Uint8Array;
  try {
    shared = x25519.getSharedSecret(ed25519.utils.toMontgomerySecret(joinSeed), message.ephemeralPublicKey);
  } catch {
    throw new ShareError("sealed share: the ephemeral key is not a usable X25519 key");
  }
  const key = holderKey(shared, message.ephemeralPublicKey, holderPublic);
  return open(key, message.nonce, message.ciphertext, associatedData("sealed", owner, holder), `the share of ${owner} held by ${holder}`);
}

export interface SplitOptions {
  clusterHalf: Uint8Array;
  nodeUnlockKey: Uint8Array;
  /** The node whose cluster half this is. */
  owner: string;
  holders: readonly Holder[];
  threshold: number;
  epoch: bigint;
}

/** One sealed share per holder, in the holders' order. */
export async function splitClusterHalf(options: SplitOptions): Promise<{ holder: string; sealedShare: Uint8Array }[]> {
  const { holders, threshold } = options;
  if (holders.length < 1 || holders.length > MAX_HOLDERS) throw new Error(`a split needs 1 to ${MAX_HOLDERS} holders, not ${holders.length}`);
  if (threshold < 1 || threshold > holders.length) throw new Error(`threshold ${threshold} is not between 1 and the ${holders.length} holders`);
  // The library accepts plain Uint8Arrays only (not Buffers, which keys
  // read from the wire or the disk are).
  const secret = new Uint8Array(options.clusterHalf);
  const shares = threshold === 1 ? holders.map(() => secret) : await split(secret, holders.length, threshold);
  const splitId = new Uint8Array(randomBytes(SPLIT_ID_BYTES));
  const check = keyCheck(secret);
  const key = wrapKey(options.nodeUnlockKey);
  return holders.map((holder, i) => {
    const body = create(ShareBodySchema, { splitId, epoch: options.epoch, threshold, count: holders.length, share: shares[i]!, keyCheck: check });
    const wrapped = seal(key, toBinary(ShareBodySchema, body), associatedData("wrapped", options.owner, holder.id));
    const wrappedBytes = toBinary(WrappedShareSchema, create(WrappedShareSchema, wrapped));
    return { holder: holder.id, sealedShare: sealToHolder(holder.joinKey, options.owner, holder.id, wrappedBytes) };
  });
}

/** The owner's side: opens a WrappedShare that `holder` returned. */
export function openWrapped(nodeUnlockKey: Uint8Array, owner: string, holder: string, wrapped: WrappedShare): ShareBody {
  const plain = open(wrapKey(nodeUnlockKey), wrapped.nonce, wrapped.ciphertext, associatedData("wrapped", owner, holder), `the share from ${holder}`);
  let body: ShareBody;
  try {
    body = fromBinary(ShareBodySchema, plain);
  } catch {
    throw new ShareError(`the share from ${holder}: not a ShareBody message`);
  }
  if (body.threshold < 1 || body.threshold > body.count || body.splitId.length !== SPLIT_ID_BYTES) {
    throw new ShareError(`the share from ${holder}: inconsistent (threshold ${body.threshold} of ${body.count})`);
  }
  return body;
}

export type CombineResult =
  | { kind: "combined"; clusterHalf: Uint8Array; epoch: bigint }
  /** Not enough shares of any one split: the best split's count and what it needs. */
  | { kind: "short"; have: number; need: number };

/** Combines the opened shares of one split once there are enough of them. */
export async function combineShares(bodies: readonly ShareBody[]): Promise<CombineResult> {
  const splits = new Map<string, ShareBody[]>();
  for (const body of bodies) {
    const id = Buffer.from(body.splitId).toString("hex");
    const group = splits.get(id) ?? [];
    // A holder answering twice with the same share does not count twice.
    if (!group.some((b) => Buffer.from(b.share).equals(Buffer.from(body.share)))) group.push(body);
    splits.set(id, group);
  }
  let best: CombineResult = { kind: "short", have: 0, need: 0 };
  // Newest split first: a split that is complete wins.
  const groups = [...splits.values()].sort((a, b) => (a[0]!.epoch > b[0]!.epoch ? -1 : 1));
  for (const group of groups) {
    const first = group[0]!;
    if (group.length < first.threshold) {
      if (best.kind === "short" && (best.need === 0 || group.length / first.threshold > best.have / best.need)) {
        best = { kind: "short", have: group.length, need: first.threshold };
      }
      continue;
    }
    const clusterHalf = first.threshold === 1 ? first.share : await combine(group.slice(0, first.threshold).map((b) => new Uint8Array(b.share)));
    const check = keyCheck(clusterHalf);
    if (check.length !== first.keyCheck.length || !timingSafeEqual(check, first.keyCheck)) {
      throw new ShareError(`the shares of split ${first.epoch} combine to a key that fails its check`);
    }
    return { kind: "combined", clusterHalf, epoch: first.epoch };
  }
  return best;
}
