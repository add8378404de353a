// The rings, their filters, the backlog and followers. See mod.ts.

import type { Level, LogEntry } from "../log/mod.ts";

/** Entries kept per component. */
export const RING_ENTRIES = 1_000;
/** Components kept; beyond it, the ring written to least recently goes. */
export const MAX_RINGS = 512;
/**
 * Characters kept in all rings together (messages, paths, fields): about
 * 16 MiB of text at two bytes each. Beyond it, the ring that holds the most
 * gives up its oldest entries: rings and entries alone would allow
 * gigabytes of long lines, more than a node has.
 */
export const MAX_TOTAL_CHARS = 8 * 1024 * 1024;
export const MAX_MESSAGE_CHARS = 2_000;
export const MAX_FIELD_CHARS = 500;
/** Entries a follower may fall behind by before it loses some. */
export const FOLLOW_QUEUE_ENTRIES = 5_000;

const LEVEL_RANK: Record<Level, number> = { debug: 0, info: 1, warn: 2, error: 3 };

/** One kept entry: what was logged, with its fields as text, and its place in the order of writing. */
export interface TreeEntry {
  seq: number;
  time: Date;
  level: Level;
  /** The component's dotted path, or "kernel". */
  path: string;
  message: string;
  fields: [string, string][];
}

export interface LogFilter {
  /** "" for everything. */
  path: string;
  /** Also the components below path. */
  subtree: boolean;
  minLevel?: Level | undefined;
}

export function matches(filter: LogFilter, entry: Pick<TreeEntry, "path" | "level">): boolean {
  if (filter.minLevel && LEVEL_RANK[entry.level] < LEVEL_RANK[filter.minLevel]) return false;
  if (filter.path === "") return true;
  if (entry.path === filter.path) return true;
  return filter.subtree && entry.path.startsWith(`${filter.path}.`);
}

function charsOf(entry: TreeEntry): number {
  return entry.path.length + entry.message.length + entry.fields.reduce((sum, [k, v]) => sum + k.length + v.length, 0);
}

function clip(text: string, max: number): string {
  return text.length <= max ? text : `${text.slice(0, max)}… (${text.length - max} more characters)`;
}

function fieldText(value: unknown): string {
  if (value instanceof Error) return value.message;
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value) ?? String(value);
  } catch {
    return String(value);
  }
}

/** A fixed-size ring of entries: the newest `capacity`, oldest first. */
class Ring {
  private readonly entries: (TreeEntry | undefined)[];
  private next = 0;
  private size = 0;
  lastWrite = 0;
  /** Characters held (charsOf each entry). */
  chars = 0;

  constructor(readonly capacity: number) {
    this.entries = new Array(capacity);
  }

  /** Keeps an entry; returns the characters freed by the entry it pushed out, if any. */
  push(entry: TreeEntry): number {
    const evicted = this.size === this.capacity ? this.entries[this.next] : undefined;
    this.entries[this.next] = entry;
    this.next = (this.next + 1) % this.capacity;
    this.size = Math.min(this.size + 1, this.capacity);
    this.lastWrite = entry.seq;
    const freed = evicted ? charsOf(evicted) : 0;
    this.chars += charsOf(entry) - freed;
    return freed;
  }

  /** Drops the oldest entry; returns the characters freed. */
  dropOldest(): number {
    if (this.size === 0) return 0;
    const index = (this.next - this.size + this.capacity) % this.capacity;
    const freed = charsOf(this.entries[index]!);
    this.entries[index] = undefined;
    this.size--;
    this.chars -= freed;
    return freed;
  }

  /** The newest `n` entries that pass `keep`, oldest first. */
  newest(n: number, keep: (entry: TreeEntry) => boolean): TreeEntry[] {
    const out: TreeEntry[] = [];
    for (let i = 1; i <= this.size && out.length < n; i++) {
      const entry = this.entries[(this.next - i + this.capacity) % this.capacity]!;
      if (keep(entry)) out.push(entry);
    }
    return out.reverse();
  }

  get length(): number {
    return this.size;
  }
}

interface Follower {
  filter: LogFilter;
  queue: TreeEntry[];
  dropped: number;
  wake?: (() => void) | undefined;
}

export interface LogTreeOptions {
  ringEntries?: number;
  maxRings?: number;
  maxTotalChars?: number;
  followQueueEntries?: number;
}

export class LogTree {
  private readonly rings = new Map<string, Ring>();
  private readonly followers = new Set<Follower>();
  private seq = 0;
  private readonly ringEntries: number;
  private readonly maxRings: number;
  private readonly followQueueEntries: number;
  private readonly maxTotalChars: number;
  private totalChars = 0;
  /**
   * Entries let go since the tree was made, by why (the node's metrics):
   * rotated out of a full ring, dropped from the largest ring to stay
   * within maxTotalChars, or not sent to a follower that fell behind.
   */
  readonly drops = { rotated: 0, space: 0, follower: 0 };

  constructor(options: LogTreeOptions = {}) {
    this.ringEntries = options.ringEntries ?? RING_ENTRIES;
    this.maxRings = options.maxRings ?? MAX_RINGS;
    this.maxTotalChars = options.maxTotalChars ?? MAX_TOTAL_CHARS;
    this.followQueueEntries = options.followQueueEntries ?? FOLLOW_QUEUE_ENTRIES;
  }

  /** A sink for internal/log: every logged entry lands in its component's ring. */
  readonly sink = (entry: LogEntry): void => {
    this.append({ time: entry.time, level: entry.level, path: entry.component, message: entry.message, fields: entry.fields });
  };

  /** Keeps one entry. Never throws. */
  append(entry: { time: Date; level: Level; path: string; message: string; fields?: Record<string, unknown> }): void {
    try {
      const kept: TreeEntry = {
        seq: ++this.seq,
        time: entry.time,
        level: entry.level,
        path: entry.path,
        message: clip(entry.message, MAX_MESSAGE_CHARS),
        fields: Object.entries(entry.fields ?? {}).map(([k, v]) => [k, clip(fieldText(v), MAX_FIELD_CHARS)]),
      };
      const ring = this.ringOf(entry.path);
      if (ring.length === ring.capacity) this.drops.rotated++;
      this.totalChars += charsOf(kept) - ring.push(kept);
      while (this.totalChars > this.maxTotalChars) {
        let largest: Ring | undefined;
        for (const ring of this.rings.values()) if (!largest || ring.chars > largest.chars) largest = ring;
        if (!largest || largest.length === 0) break;
        this.totalChars -= largest.dropOldest();
        this.drops.space++;
      }
      for (const follower of this.followers) {
        if (!matches(follower.filter, kept)) continue;
        if (follower.queue.length >= this.followQueueEntries) {
          follower.dropped++;
          this.drops.follower++;
        } else follower.queue.push(kept);
        follower.wake?.();
      }
    } catch {
      // Logs must never take their writer down.
    }
  }

  /** The newest `n` entries (all kept with n < 0) among the rings the filter selects, in the order they were written. */
  backlog(filter: LogFilter, n: number): TreeEntry[] {
    if (n === 0) return [];
    const limit = n < 0 ? Number.POSITIVE_INFINITY : n;
    const keep = (entry: TreeEntry) => matches(filter, entry);
    const merged: TreeEntry[] = [];
    for (const [path, ring] of this.rings) {
      if (!matches({ ...filter, minLevel: undefined }, { path, level: "error" })) continue;
      merged.push(...ring.newest(limit, keep));
    }
    merged.sort((a, b) => a.seq - b.seq);
    return Number.isFinite(limit) ? merged.slice(-limit) : merged;
  }

  /**
   * Entries appended from now on that pass the filter, until the signal
   * aborts. A follower that falls FOLLOW_QUEUE_ENTRIES behind loses the
   * newest entries and gets, in their place, one entry saying how many.
   */
  async *follow(filter: LogFilter, signal: AbortSignal): AsyncIterable<TreeEntry> {
    const follower: Follower = { filter, queue: [], dropped: 0 };
    this.followers.add(follower);
    const onAbort = () => follower.wake?.();
    signal.addEventListener("abort", onAbort, { once: true });
    try {
      while (!signal.aborted) {
        if (follower.queue.length === 0 && follower.dropped === 0) {
          await new Promise<void>((resolve) => (follower.wake = resolve));
          follower.wake = undefined;
          continue;
        }
        const batch = follower.queue.splice(0);
        for (const entry of batch) yield entry;
        if (follower.dropped > 0) {
          const dropped = follower.dropped;
          follower.dropped = 0;
          yield { seq: this.seq, time: new Date(), level: "warn", path: "logtree", message: `follower fell behind: ${dropped} entries not sent`, fields: [] };
        }
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.followers.delete(follower);
    }
  }

  /** The components that have entries. */
  paths(): string[] {
    return [...this.rings.keys()].sort();
  }

  /** How much is kept: rings, entries, and the characters of their text. */
  stats(): { rings: number; entries: number; chars: number } {
    let entries = 0;
    for (const ring of this.rings.values()) entries += ring.length;
    return { rings: this.rings.size, entries, chars: this.totalChars };
  }

  private ringOf(path: string): Ring {
    let ring = this.rings.get(path);
    if (ring) return ring;
    if (this.rings.size >= this.maxRings) {
      let stalest: string | undefined;
      let stalestWrite = Number.POSITIVE_INFINITY;
      for (const [p, r] of this.rings) {
        if (r.lastWrite < stalestWrite) {
          stalestWrite = r.lastWrite;
          stalest = p;
        }
      }
      if (stalest !== undefined) {
        this.totalChars -= this.rings.get(stalest)!.chars;
        this.rings.delete(stalest);
      }
    }
    ring = new Ring(this.ringEntries);
    this.rings.set(path, ring);
    return ring;
  }
}
