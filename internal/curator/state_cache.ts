// The curator's reads, served from memory and still linearizable.
//
// A read through etcd cost every call two or three etcd round trips; here
// one watch keeps a copy of everything under ETCD_PREFIX, and reads are
// answered from the copy once it is proven current by revision:
//
//   etcd ──watch (ETCD_PREFIX, from the load's revision + 1)──▶ entries, revision E
//        ──one linearizable range (count only), shared by   ──▶ revision R
//          every read that arrived before it was sent (read_index.ts)
//
//   read: R = the next shared check's revision
//         wait until E ≥ R, or the copy is proven unchanged up to R
//         answer from the copy (a StateSnapshot, which never changes)
//
//   check, when E < R:  keys under the prefix created, deleted or written
//                       since E? ─ yes ─▶ the watch owes the copy events: wait for them
//                                ─ no ──▶ proven: the copy is etcd's state at R
//
// Why that is linearizable. Every write acknowledged before a read began
// has a revision ≤ R: the check is a linearizable etcd read sent after the
// read began (read_index.ts says why a check already in flight will not
// do). The copy holds etcd's state under the prefix at revision E exactly:
// it is loaded by one range at a revision S, the watch starts at S + 1, etcd
// delivers every event under the prefix in revision order and all of one
// revision in one response, and E is the revision of the last event applied
// (never a header's or a progress notification's revision, which do not
// promise that the events before them were sent). So when E ≥ R, the copy
// is a state etcd committed at or after R, before the answer: what a
// linearizable etcd read may return.
//
// E stays behind R when the writes since E were outside the prefix (etcd's
// revision is global): the watch has nothing to send. Then the check proves
// the copy current instead: R's count of keys under the prefix equals the
// copy's, and no key under the prefix at revision R was written after E
// (a range at R with min_mod_revision E + 1). Every key alive at R was then
// written at or before E and not touched since, so it is in the copy with
// the same value; equal counts leave no room for one the copy holds but R
// does not. The proof holds for the copy as it was when the check began, so
// it counts only if no event was applied meanwhile. When the counts differ,
// or a key was written since E, the watch owes the copy that event: reads
// wait for it rather than ask etcd again. (The second range makes etcd read
// the prefix's values; it is sent only when the counts agree and E is
// behind R, which takes writes outside the prefix.)
//
// What is never trusted: a watch that was interrupted. etcd3 resumes an
// interrupted watch from the last *header* revision it saw, which can skip
// events; so any disconnection or error drops the copy, the runnable dies,
// and the supervisor starts it again with a fresh load and a fresh watch.
// While there is no copy, or if one does not catch up within
// CATCH_UP_TIMEOUT_MS, a read is one linearizable range of the whole prefix.
//
// Writes do not go through here: they stay compare-and-swap transactions in
// etcd, fenced on leadership (store.ts).

import type { Etcd3, IRangeResponse, IWatchResponse, Namespace } from "etcd3";
import { UnavailableError } from "../rpc/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { ReadIndex } from "./read_index.ts";
import { StateSnapshot, type StateEntry } from "./state_snapshot.ts";
import { ETCD_PREFIX } from "./store.ts";

/**
 * A read waits this long for the copy to catch up with etcd before it reads
 * etcd itself. Short, so that a lagging watch never makes a read much slower
 * than the direct one: at 2 s (the clients' own deadline) a leader under a
 * fault run's load on an emulated VM answered nothing in time.
 */
export const CATCH_UP_TIMEOUT_MS = 500;

const PREFIX = Buffer.from(ETCD_PREFIX);
/** The end of the prefix's key range: the prefix with its last byte incremented. */
const PREFIX_END = Buffer.concat([PREFIX.subarray(0, -1), Buffer.from([PREFIX.at(-1)! + 1])]);

export class StateCacheError extends Error {
  override name = "StateCacheError";
}

/** The copy while its watch runs. */
interface Copy {
  entries: Map<string, StateEntry>;
  /** E: the copy is etcd's state under the prefix at this revision. */
  revision: bigint;
  /** Bumped by every applied change: a proof holds only for the copy it was made on. */
  changes: number;
  /** A later revision at which etcd's state was proven the same as the copy's (made on `changes`). */
  proven?: { changes: number; revision: bigint };
  /** The snapshot of the copy, made by the first read after a change. */
  snapshot?: StateSnapshot;
  /** Set when the watch broke: the copy answers nothing more. */
  dropped: boolean;
}

/** What one shared check found. */
interface Check {
  /** etcd's revision when it answered: every write acknowledged before the check was sent is at or below it. */
  revision: bigint;
  /**
   * Set when the check saw keys under the prefix written after the copy's
   * revision: the watch owes the copy those events, and asking etcd again
   * before they come would show nothing new. The copy's `changes` then.
   */
  owedAt?: number;
}

export interface StateCacheOptions {
  /**
   * For tests: every watch response is applied through this, in order; a
   * test holds some back to make the copy fall behind etcd.
   */
  deliver?: (apply: () => void) => void;
}

/** What a read goes through: a StateCache, or anything that reads the same state. */
export interface StateReader {
  /** A linearizable state: no write acknowledged before this call is missing from it. */
  read(signal?: AbortSignal): Promise<StateSnapshot>;
}

export class StateCache implements StateReader {
  /** A client of its own, so that its watch is a stream of its own. Keys are absolute. */
  readonly #etcd: Namespace;
  readonly #index: ReadIndex<Check>;
  readonly #deliver: (apply: () => void) => void;
  #copy: Copy | undefined;
  #changed = Promise.withResolvers<void>();
  /** Written here, read by tests and logs: how reads were answered, and what the copy went through. */
  readonly counts = { fromCopy: 0, direct: 0, checks: 0, proofs: 0, loads: 0 };

  /** `etcd`: the curator's client of its etcd member (not namespaced). */
  constructor(etcd: Etcd3, options: StateCacheOptions = {}) {
    this.#etcd = etcd.namespace("");
    this.#index = new ReadIndex(() => this.#check());
    this.#deliver = options.deliver ?? ((apply) => apply());
  }

  /** Whether a watched copy answers reads now (for tests and logs). */
  get live(): boolean {
    return this.#copy !== undefined;
  }

  /** Loads the copy and keeps it current until cancelled; dies (to be restarted) when the watch breaks. */
  runnable(): Runnable {
    return async (ctx) => {
      const loaded = await this.#readAll();
      this.counts.loads++;
      const copy: Copy = { entries: entriesOf(loaded), revision: BigInt(loaded.header.revision), changes: 0, dropped: false };
      const watcher = this.#etcd
        .watch()
        .inRange({ start: PREFIX, end: PREFIX_END })
        .startRevision(String(copy.revision + 1n))
        .watcher();
      let broken!: (err: Error) => void;
      const lost = new Promise<never>((_, reject) => (broken = reject));
      const drop = (why: string, cause?: unknown) => {
        if (copy.dropped) return;
        copy.dropped = true;
        if (this.#copy === copy) this.#copy = undefined;
        this.#notify();
        broken(new StateCacheError(`the state cache's etcd watch ${why}; loading it again`, { cause }));
      };
      // Listeners first: a response can follow the watch's creation at once.
      watcher.on("data", (response: IWatchResponse) =>
        this.#deliver(() => {
          if (copy.dropped) return;
          const problem = this.#apply(copy, response);
          if (problem) drop(problem);
        }),
      );
      watcher.on("disconnected", (err: Error) => drop(`was interrupted (${err.message})`, err));
      watcher.on("error", (err: Error) => drop(`failed (${err.message})`, err));
      const connected = new Promise<void>((resolve) => watcher.once("connected", () => resolve()));
      // The copy is exact at its revision already; the watch only moves it on.
      this.#copy = copy;
      this.#notify();
      try {
        await Promise.race([connected, lost, untilCancelled(ctx.signal)]);
        if (ctx.signal.aborted) return;
        ctx.logger.info("state cache watching", { revision: String(copy.revision) });
        ctx.signalHealthy();
        await Promise.race([lost, untilCancelled(ctx.signal)]);
      } finally {
        copy.dropped = true;
        if (this.#copy === copy) this.#copy = undefined;
        this.#notify();
        // Not awaited: on a broken stream etcd3 settles the cancel only when it reconnects.
        void watcher.cancel().catch(() => {});
      }
    };
  }

  async read(signal?: AbortSignal): Promise<StateSnapshot> {
    if (!this.#copy) return this.#readDirect();
    let check = await this.#index.next().catch((err: unknown) => {
      throw new UnavailableError(`the curator could not learn etcd's current revision: ${(err as Error).message}`, { cause: err });
    });
    const target = check.revision;
    const deadline = performance.now() + CATCH_UP_TIMEOUT_MS;
    for (;;) {
      signal?.throwIfAborted();
      const copy = this.#copy;
      if (!copy) return this.#readDirect();
      if (currentAt(copy, target)) {
        this.counts.fromCopy++;
        return snapshotOf(copy);
      }
      const left = deadline - performance.now();
      if (left <= 0) return this.#readDirect();
      // Wait for the watch to bring the copy to `target`. When the last
      // check saw no events owed to the copy, none may come (the writes
      // since were outside the prefix): a later check may prove it there.
      const changed = this.#changed.promise;
      const owed = check.owedAt !== undefined && check.owedAt === copy.changes;
      const later = owed
        ? changed
        : this.#index.next().then(
            (c) => void (check = c),
            () => undefined,
          );
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, left)));
      let onAbort: (() => void) | undefined;
      const aborted = new Promise<void>((resolve) => {
        onAbort = resolve;
        signal?.addEventListener("abort", onAbort, { once: true });
      });
      try {
        await Promise.race([changed, later, timeout, aborted]);
      } finally {
        clearTimeout(timer);
        if (onAbort) signal?.removeEventListener("abort", onAbort);
      }
    }
  }

  /** Applies one watch response; returns what is wrong with it, if anything. */
  #apply(copy: Copy, response: IWatchResponse): string | undefined {
    // Progress notifications carry no events and prove nothing (see the header).
    if (response.events.length === 0) return undefined;
    let revision = copy.revision;
    for (const event of response.events) {
      const modRevision = BigInt(event.kv.mod_revision);
      if (modRevision <= copy.revision) return `sent revision ${modRevision}, at or before the copy's ${copy.revision}`;
      const key = relativeKey(event.kv.key);
      if (key === undefined) return `sent key ${event.kv.key.toString()}, outside ${ETCD_PREFIX}`;
      if (event.type === "Delete") copy.entries.delete(key);
      else copy.entries.set(key, { value: event.kv.value, modRevision });
      if (modRevision > revision) revision = modRevision;
    }
    copy.revision = revision;
    copy.changes++;
    delete copy.proven;
    delete copy.snapshot;
    this.#notify();
    return undefined;
  }

  /**
   * One shared check: etcd's current revision, by a linearizable read.
   * When the copy is behind it, also says whether the watch owes the copy
   * events, or proves that it does not (see the header).
   */
  async #check(): Promise<Check> {
    try {
      return await this.#checkCopy();
    } finally {
      this.counts.checks++;
    }
  }

  async #checkCopy(): Promise<Check> {
    const copy = this.#copy;
    const base = copy && { revision: copy.revision, changes: copy.changes, count: copy.entries.size };
    const counted = await this.#etcd.kv.range({ key: PREFIX, range_end: PREFIX_END, count_only: true });
    const revision = BigInt(counted.header.revision);
    if (!copy || !base || copy.dropped || copy.changes !== base.changes) return { revision };
    if (base.revision >= revision || (copy.proven && copy.proven.revision >= revision)) return { revision };
    // A key created or deleted since: its event is on its way.
    if (BigInt(counted.count) !== BigInt(base.count)) return { revision, owedAt: base.changes };
    try {
      const written = await this.#etcd.kv.range({
        key: PREFIX,
        range_end: PREFIX_END,
        revision: String(revision),
        min_mod_revision: String(base.revision + 1n),
        keys_only: true,
        limit: 1,
      });
      // A key written since: its event is on its way.
      if (written.kvs.length > 0) return { revision, owedAt: base.changes };
      if (!copy.dropped && copy.changes === base.changes) {
        copy.proven = { changes: base.changes, revision };
        this.counts.proofs++;
        this.#notify();
      }
    } catch {
      // Not proven this time: reads wait for the watch or the next check.
    }
    return { revision };
  }

  /** Every key under the prefix, by one linearizable range. */
  #readAll(): Promise<IRangeResponse> {
    return this.#etcd.kv.range({ key: PREFIX, range_end: PREFIX_END });
  }

  async #readDirect(): Promise<StateSnapshot> {
    this.counts.direct++;
    let response: IRangeResponse;
    try {
      response = await this.#readAll();
    } catch (err) {
      throw new UnavailableError(`the curator could not read its state from etcd: ${(err as Error).message}`, { cause: err });
    }
    return new StateSnapshot(BigInt(response.header.revision), entriesOf(response));
  }

  #notify(): void {
    this.#changed.resolve();
    this.#changed = Promise.withResolvers<void>();
  }
}

/** Whether the copy holds etcd's state at `target` or later. */
function currentAt(copy: Copy, target: bigint): boolean {
  if (copy.dropped) return false;
  if (copy.revision >= target) return true;
  return copy.proven !== undefined && copy.proven.changes === copy.changes && copy.proven.revision >= target;
}

function snapshotOf(copy: Copy): StateSnapshot {
  copy.snapshot ??= new StateSnapshot(copy.revision, new Map(copy.entries));
  return copy.snapshot;
}

function entriesOf(response: IRangeResponse): Map<string, StateEntry> {
  const entries = new Map<string, StateEntry>();
  for (const kv of response.kvs) {
    const key = relativeKey(kv.key);
    if (key !== undefined) entries.set(key, { value: kv.value, modRevision: BigInt(kv.mod_revision) });
  }
  return entries;
}

function relativeKey(key: Buffer): string | undefined {
  if (!key.subarray(0, PREFIX.length).equals(PREFIX)) return undefined;
  return key.subarray(PREFIX.length).toString();
}
