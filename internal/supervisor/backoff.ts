// Exponential backoff between restarts of a dead runnable (Monogon's policy).

export const BACKOFF_INITIAL_MS = 500;
export const BACKOFF_MULTIPLIER = 1.5;
export const BACKOFF_MAX_MS = 60_000;
/** Each delay is drawn from interval × [1 − jitter, 1 + jitter]. */
export const BACKOFF_JITTER = 0.5;

export interface BackoffPolicy {
  initialMs: number;
  multiplier: number;
  maxMs: number;
  jitter: number;
}

export const DEFAULT_BACKOFF: BackoffPolicy = {
  initialMs: BACKOFF_INITIAL_MS,
  multiplier: BACKOFF_MULTIPLIER,
  maxMs: BACKOFF_MAX_MS,
  jitter: BACKOFF_JITTER,
};

/** The delay before each next restart; grows on every death, resets once healthy. */
export class Backoff {
  private interval: number;

  constructor(
    private readonly policy: BackoffPolicy = DEFAULT_BACKOFF,
    private readonly random: () => number = Math.random,
  ) {
    this.interval = policy.initialMs;
  }

  /** The current interval, before jitter. */
  get intervalMs(): number {
    return this.interval;
  }

  /** Returns the delay to wait now and grows the interval for next time. */
  next(): number {
    const { jitter, multiplier, maxMs } = this.policy;
    const delay = this.interval * (1 - jitter + 2 * jitter * this.random());
    this.interval = Math.min(this.interval * multiplier, maxMs);
    return Math.round(delay);
  }

  reset(): void {
    this.interval = this.policy.initialMs;
  }
}
