// Package event: watchable values, Monogon's "event values" in TypeScript.
//
// A Value<T> holds the latest state of something (the node's address, its
// roles, the curator connection) and lets any number of consumers wait for it
// and follow its changes without polling:
//
//   producer ── set(v1) ── set(v2) ── set(v3) ──▶ Value<T> (keeps only latest)
//                                                   │
//                   ┌───────────────────────────────┼──────────────────┐
//                   ▼                               ▼                  ▼
//           watcher A: get() → v3          watcher B: for await …   value.get()
//           (saw v1 earlier; v2 collapsed)  (each distinct update    (latest, waiting
//                                             it has not yet seen)     for the first)
//
// Invariants:
//  - A watcher never returns the same update twice and never returns an older
//    update after a newer one; updates it was too slow for collapse into the
//    latest (it is state, not a queue).
//  - Every blocking call takes an AbortSignal and removes its listeners when
//    it returns. A closed watcher ends its iteration and rejects pending gets.
//  - One watcher per consumer: watchers are cheap and independent.

export { Value, followValues, type ValueChange, type Watcher, WatcherClosedError } from "./value.ts";
