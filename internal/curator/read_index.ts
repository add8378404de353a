// Read-index batching: many concurrent reads share one linearizable etcd
// call, and none of them shares a call that was sent before it began.
//
//   reads ──▶ next() ─┬─ nothing in flight: send a check now, join it
//                     └─ a check in flight: join the queued one, sent the
//                        moment the in-flight one settles
//
//   time ──────────────────────────────────────────────────────────▶
//   check 1  [sent ······ answered]
//   reads      a   b          c          ← a, b, c arrived while 1 was in flight
//   check 2                   [sent ······ answered]   ← answers a, b and c
//
// A check sent before a read began may have been answered by etcd before a
// write the caller saw acknowledged; one sent after cannot. So a read waits
// for the next check to be *sent*, never for one already under way: with one
// check in flight and at most one queued, every read waits at most two
// round trips, and etcd sees one call per round trip however many read.

/** Shares calls of `check` among concurrent callers, each getting a call sent after it asked. */
export class ReadIndex<T> {
  readonly #check: () => Promise<T>;
  #inFlight: Promise<T> | undefined;
  #queued: Promise<T> | undefined;

  constructor(check: () => Promise<T>) {
    this.#check = check;
  }

  /** The result of a check sent after this call (shared with whoever else asks meanwhile). */
  next(): Promise<T> {
    if (this.#queued) return this.#queued;
    if (!this.#inFlight) return this.#send();
    const inFlight = this.#inFlight;
    const queued: Promise<T> = inFlight.then(
      (): Promise<T> => this.#sendQueued(queued),
      (): Promise<T> => this.#sendQueued(queued),
    );
    this.#queued = queued;
    return queued;
  }

  #sendQueued(queued: Promise<T>): Promise<T> {
    // From here on, newcomers must wait for a later check.
    if (this.#queued === queued) this.#queued = undefined;
    return this.#send();
  }

  #send(): Promise<T> {
    let sent: Promise<T>;
    try {
      sent = this.#check();
    } catch (err) {
      sent = Promise.reject(err);
    }
    this.#inFlight = sent;
    const settled = () => {
      if (this.#inFlight === sent) this.#inFlight = undefined;
    };
    sent.then(settled, settled);
    return sent;
  }
}
