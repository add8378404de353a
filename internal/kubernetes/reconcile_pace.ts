// When the controller's reconciler makes its next pass over the apiserver
// (the Nodes against the records, the cluster DNS objects, the volumes of
// nodes that are gone). A pass is about ten requests; made every few seconds
// whatever happened, they were a steady load on an apiserver that was
// already the slowest part of a loaded node, and a pass that timed out
// killed the reconciler, which then did its whole start again (the base
// objects, its clients): 34 restarts on node1 in one TCG e2e run. So:
//
//   - the records are read every tick (RECONCILE_TICK_MS, one curator call);
//     a pass follows when they changed, when a pass asked for another look
//     soon (a node missing from the records is taken as gone only on a
//     second look), or when the resync is due (RECONCILE_RESYNC_MS: what a
//     user changed in Kubernetes, such as a deleted kube-dns Service);
//   - a pass that fails is told and tried again after a backoff that doubles
//     up to RECONCILE_MAX_BACKOFF_MS, and the reconciler keeps running: the
//     apiserver being slow is degraded service, not a fault of ours.

/** How often the records are read. */
export const RECONCILE_TICK_MS = 5_000;
/** The longest time between two passes while the records stay the same. */
export const RECONCILE_RESYNC_MS = 20_000;
/** The longest wait after failed passes. */
export const RECONCILE_MAX_BACKOFF_MS = 60_000;

/** The pacing of one reconciler's passes; times are the caller's clock (ms). */
export class ReconcilePace {
  private lastKey: string | undefined;
  private lastPassAt = Number.NEGATIVE_INFINITY;
  private again = false;
  private retryAt = 0;
  /** Failed passes in a row. */
  failures = 0;

  constructor(private readonly limits = { tickMs: RECONCILE_TICK_MS, resyncMs: RECONCILE_RESYNC_MS, maxBackoffMs: RECONCILE_MAX_BACKOFF_MS }) {}

  /** Whether a pass is due, for records whose content is `key`. */
  due(key: string, now: number): boolean {
    if (this.failures > 0) return now >= this.retryAt;
    return this.again || key !== this.lastKey || now - this.lastPassAt >= this.limits.resyncMs;
  }

  /** A pass over records `key` went through; `again`: it wants another look at the next tick. Returns the failures it ends. */
  passed(key: string, now: number, again: boolean): number {
    const ended = this.failures;
    this.lastKey = key;
    this.lastPassAt = now;
    this.again = again;
    this.failures = 0;
    return ended;
  }

  /** A pass (or the records' read) failed; returns how long until the next try. */
  failed(now: number): number {
    this.failures++;
    const wait = Math.min(this.limits.maxBackoffMs, this.limits.tickMs * 2 ** (this.failures - 1));
    this.retryAt = now + wait;
    return wait;
  }
}

/** The records as a key that changes when they do (order aside). */
export function recordsKey(records: { workers: ReadonlyMap<string, string>; controllers?: ReadonlyMap<string, string>; known: ReadonlySet<string> }): string {
  const sorted = (m: ReadonlyMap<string, string>) => [...m].sort(([a], [b]) => a.localeCompare(b));
  return JSON.stringify([sorted(records.workers), [...records.known].sort(), ...(records.controllers ? [sorted(records.controllers)] : [])]);
}
