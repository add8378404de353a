// Package coldstart: a full restart of the cluster with no key on any disk
// that opens that disk's own data (README, "Cold start").
//
// A consensus member's data key is made from its node half (its ESP) and
// its cluster half (etcd). etcd is on the encrypted data partitions, so when
// every consensus member restarts at once nobody can hand out cluster
// halves. Instead each member's cluster half is split into shares, one per
// other consensus member, t of which open it:
//
//   member A (running)                                  member B (any state)
//   ──────────────────                                  ────────────────────
//   worker_coldstart (roleserve):
//     split A's cluster half (shares.ts) ──HoldShare──▶ ShareHolder (server.ts, service.ts)
//     every holder acknowledged? ─▶ ESP: unlock_shares,     ─▶ ESP: held_shares.pb (held_shares.ts)
//       cold-start key erased
//
//   member A (cold start, nothing unlocked)
//   flow_join: no curator answers ──GetShares (join certificate)──▶ B returns A's WrappedShares
//     open each with A's node half, combine t of one split (client.ts) ─▶ A's data opens
//
// Keys and certificates: shares are sealed to the holder's join key (its
// ESP), and wrapped under a key only the owner's ESP yields, so no single
// disk holds what opens its own data. Before unlock both sides prove who
// they are with join certificates: the cluster CA's "this join key is node
// X", which the curator issues to consensus members (PrepareColdStart).
//
// A one-node cluster has nobody to hold shares: its only consensus member
// keeps its cluster half on its ESP ("disk alone unlocks"), and the second
// consensus member turns sharing on.

export { SHARE_HOLDER_PORT, shareHolderRunnable, type ShareHolderOptions } from "./server.ts";
export { dialShareHolder, gatherShares, peersOf, SHARE_CALL_TIMEOUT_MS, type GatherResult, type Peer, type ShareClientTls } from "./client.ts";
export { shareHolderService, isConsensusMember, SHARE_HOLDER_POLICY } from "./service.ts";
export { dropShares, holdShare, readHeldShares, sharesHeldFor, HeldSharesError } from "./held_shares.ts";
export { defaultThreshold, describeColdStart, effectiveThreshold, MAX_UNLOCK_SHARE_THRESHOLD } from "./threshold.ts";
export { combineShares, openAsHolder, openWrapped, sealToHolder, splitClusterHalf, ShareError, MAX_HOLDERS, type CombineResult, type Holder } from "./shares.ts";
