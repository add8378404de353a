// The shares a consensus member holds for the others, in one file on its
// ESP (layout.esp.heldShares), readable before its own data is unlocked.
// Each share in it is sealed to this node's join key.
//
// For each owner the file keeps at most two shares: the one of the split
// the owner relies on (its committed epoch) and the newest. So a new split
// that reaches only some holders before a power cut never leaves the owner
// without a complete old one.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { existsSync, readFileSync } from "node:fs";
import { HeldSharesSchema, HeldShares_ShareSchema, type HeldShares, type HeldShares_Share } from "../../proto/gen/coldstart/coldstart_pb.ts";
import { writeFileDurablyAsync } from "../localstorage/mod.ts";

export class HeldSharesError extends Error {
  override name = "HeldSharesError";
}

export function readHeldShares(path: string): HeldShares {
  if (!existsSync(path)) return create(HeldSharesSchema);
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (err) {
    throw new HeldSharesError(`the held shares file ${path} could not be read (${(err as Error).message}): is the ESP damaged?`, { cause: err });
  }
  try {
    return fromBinary(HeldSharesSchema, bytes);
  } catch (err) {
    throw new HeldSharesError(`the held shares file ${path} is corrupt: ${(err as Error).message}`, { cause: err });
  }
}

function write(path: string, held: HeldShares): Promise<void> {
  return writeFileDurablyAsync(path, toBinary(HeldSharesSchema, held), { mode: 0o600 });
}

/** Stores `owner`'s share of split `epoch`, keeping only that and the owner's committed split. */
export async function holdShare(path: string, share: { owner: string; epoch: bigint; committedEpoch: bigint; sealedShare: Uint8Array }): Promise<void> {
  const held = readHeldShares(path);
  const others = held.shares.filter((s) => s.owner !== share.owner);
  const kept = held.shares.filter((s) => s.owner === share.owner && s.epoch === share.committedEpoch && s.epoch !== share.epoch);
  held.shares = [...others, ...kept, create(HeldShares_ShareSchema, { owner: share.owner, epoch: share.epoch, sealedShare: share.sealedShare })];
  await write(path, held);
}

/** The shares held for `owner`. */
export function sharesHeldFor(path: string, owner: string): HeldShares_Share[] {
  return readHeldShares(path).shares.filter((s) => s.owner === owner);
}

/** Drops the shares of every owner `keep` refuses; returns those owners. */
export async function dropShares(path: string, keep: (owner: string) => boolean): Promise<string[]> {
  if (!existsSync(path)) return [];
  const held = readHeldShares(path);
  const dropped = [...new Set(held.shares.filter((s) => !keep(s.owner)).map((s) => s.owner))];
  if (dropped.length === 0) return [];
  held.shares = held.shares.filter((s) => keep(s.owner));
  await write(path, held);
  return dropped;
}
