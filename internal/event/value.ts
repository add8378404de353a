// Value<T> and its watchers; see mod.ts for the semantics.

export class WatcherClosedError extends Error {
  override name = "WatcherClosedError";
  constructor() {
    super("watcher is closed");
  }
}

interface Waiter {
  wake(): void;
}

/** A watchable value: the latest state of something, and a way to follow it. */
export class Value<T> {
  private current: T | undefined;
  private version = 0;
  private readonly waiters = new Set<Waiter>();

  /** Publishes a new state; every watcher will see it (or a later one). */
  set(value: T): void {
    this.current = value;
    this.version++;
    const waiters = [...this.waiters];
    this.waiters.clear();
    for (const waiter of waiters) waiter.wake();
  }

  /** The latest value without waiting, or undefined if none was ever set. */
  peek(): T | undefined {
    return this.version > 0 ? this.current : undefined;
  }

  /** The latest value, waiting for the first one if none was set yet. */
  async get(options: { signal?: AbortSignal } = {}): Promise<T> {
    using watcher = this.watch();
    return await watcher.get(options);
  }

  /** The first value (current or future) for which `predicate` holds; narrowed to `U` when the predicate is a type guard (`(v) => v !== undefined`). */
  waitFor<U extends T>(predicate: (value: T) => value is U, options?: { signal?: AbortSignal }): Promise<U>;
  waitFor(predicate: (value: T) => boolean, options?: { signal?: AbortSignal }): Promise<T>;
  async waitFor(predicate: (value: T) => boolean, options: { signal?: AbortSignal } = {}): Promise<T> {
    using watcher = this.watch();
    return await watcher.getWhen(predicate, options);
  }

  /** A new independent watcher; dispose of it when done (`using`, or close()). */
  watch(): Watcher<T> {
    return new ValueWatcher(this);
  }

  /** @internal used by watchers */
  _state(): { version: number; current: T | undefined } {
    return { version: this.version, current: this.current };
  }

  /**
   * @internal Calls `wake` once the version moves past `seen` (at once if it
   * already has). Returns a function that cancels the subscription.
   */
  _subscribe(seen: number, wake: () => void): () => void {
    if (this.version > seen) {
      wake();
      return () => {};
    }
    const waiter: Waiter = { wake };
    this.waiters.add(waiter);
    return () => this.waiters.delete(waiter);
  }
}

export interface Watcher<T> extends AsyncIterable<T>, Disposable {
  /**
   * The newest update this watcher has not returned yet, waiting for one if
   * it has seen the latest. The first call returns the current value if set.
   */
  get(options?: { signal?: AbortSignal }): Promise<T>;
  /** The next unseen update for which `predicate` holds. */
  getWhen(predicate: (value: T) => boolean, options?: { signal?: AbortSignal }): Promise<T>;
  close(): void;
}

class ValueWatcher<T> implements Watcher<T> {
  private seen = 0;
  private isClosed = false;
  /** Rejects the pending get, if any, when the watcher is closed. */
  private interrupt: ((err: Error) => void) | undefined;

  constructor(private readonly value: Value<T>) {}

  async get(options: { signal?: AbortSignal } = {}): Promise<T> {
    for (;;) {
      if (this.isClosed) throw new WatcherClosedError();
      const { version, current } = this.value._state();
      if (version > this.seen) {
        this.seen = version;
        return current as T;
      }
      await this.changed(options.signal);
    }
  }

  private changed(signal: AbortSignal | undefined): Promise<void> {
    signal?.throwIfAborted();
    return new Promise<void>((resolve, reject) => {
      let unsubscribe = () => {};
      const finish = (err?: unknown) => {
        unsubscribe();
        signal?.removeEventListener("abort", onAbort);
        this.interrupt = undefined;
        if (err === undefined) resolve();
        else reject(err);
      };
      const onAbort = () => finish(signal?.reason);
      signal?.addEventListener("abort", onAbort, { once: true });
      this.interrupt = finish;
      unsubscribe = this.value._subscribe(this.seen, () => finish());
    });
  }

  async getWhen(predicate: (value: T) => boolean, options: { signal?: AbortSignal } = {}): Promise<T> {
    for (;;) {
      const value = await this.get(options);
      if (predicate(value)) return value;
    }
  }

  close(): void {
    if (this.isClosed) return;
    this.isClosed = true;
    this.interrupt?.(new WatcherClosedError());
  }

  [Symbol.dispose](): void {
    this.close();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<T> {
    try {
      for (;;) {
        try {
          yield await this.get();
        } catch (err) {
          if (err instanceof WatcherClosedError) return;
          throw err;
        }
      }
    } finally {
      this.close();
    }
  }
}

/** One update from followValues: which value changed, and to what. */
export type ValueChange<T extends Record<string, Value<unknown>>> = {
  [K in keyof T]: { key: K; value: T[K] extends Value<infer V> ? V : never };
}[keyof T];

/**
 * Follows several values at once, yielding each update (as a watcher would:
 * first the current value of each, then changes; intermediate ones
 * collapse) until the signal aborts. One pending get per value is kept
 * across updates, so an update is never swallowed by a get that lost a race.
 */
export async function* followValues<T extends Record<string, Value<unknown>>>(values: T, signal: AbortSignal): AsyncIterable<ValueChange<T>> {
  const watchers = Object.entries(values).map(([key, value]) => ({ key, watcher: value.watch() }));
  const next = (entry: (typeof watchers)[number]) => entry.watcher.get({ signal }).then((value) => ({ entry, change: { key: entry.key, value } as ValueChange<T> }));
  const pending = new Map(watchers.map((entry) => [entry, next(entry)]));
  for (const promise of pending.values()) promise.catch(() => {});
  try {
    for (;;) {
      const { entry, change } = await Promise.race(pending.values());
      const again = next(entry);
      again.catch(() => {});
      pending.set(entry, again);
      yield change;
    }
  } finally {
    for (const { watcher } of watchers) watcher.close();
  }
}
