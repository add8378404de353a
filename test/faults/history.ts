// What the fault suite's workload records: every operation a client made,
// when it was invoked and completed (ms on one monotonic clock), and what
// came of it. The checker (checker.ts) reads nothing else.
//
//   result  ok       the call returned success (a read carries what it saw)
//           failed   the call was refused before it could take effect
//                    (not the leader, invalid, fenced): it did not happen
//           unknown  no answer (deadline, connection lost mid-call): it may
//                    or may not have happened, then or at any later time

export type OpResult = "ok" | "failed" | "unknown";

interface OpBase {
  /** Unique per operation in a history. */
  id: number;
  client: number;
  /** The label key: each key is one register. */
  key: string;
  invokedMs: number;
  /** When the result arrived; for unknown results, when the client gave up. */
  completedMs: number;
  result: OpResult;
  /** Why it was not ok: the first line of what the call threw. */
  reason?: string;
}

/** Sets the key to a value no other write uses. */
export interface WriteOp extends OpBase {
  kind: "write";
  value: string;
}

/** Reads the key: the value seen, or null when the key was absent. */
export interface ReadOp extends OpBase {
  kind: "read";
  /** Set only when result is ok. */
  value?: string | null;
}

export type Op = WriteOp | ReadOp;

/** The first line of what a call threw, as an op keeps it. */
function reasonOf(err: unknown): string {
  return (err instanceof Error ? err.message : String(err)).split("\n")[0]!;
}

/** Records operations as a workload makes them. */
export class HistoryRecorder {
  readonly ops: Op[] = [];
  private nextId = 1;

  constructor(private readonly now: () => number = () => performance.now()) {}

  /** Runs `call` as one operation and records it; `classify` turns a thrown error into failed or unknown. */
  async write(client: number, key: string, value: string, call: () => Promise<void>, classify: (err: unknown) => "failed" | "unknown"): Promise<OpResult> {
    const invokedMs = this.now();
    const id = this.nextId++;
    let result: OpResult;
    let reason: string | undefined;
    try {
      await call();
      result = "ok";
    } catch (err) {
      result = classify(err);
      reason = reasonOf(err);
    }
    this.ops.push({ id, client, kind: "write", key, value, invokedMs, completedMs: this.now(), result, ...(reason !== undefined ? { reason } : {}) });
    return result;
  }

  /** Reads several keys in one call (GetNodes returns all labels): one read op per key. */
  async read(client: number, keys: readonly string[], call: () => Promise<Map<string, string>>, classify: (err: unknown) => "failed" | "unknown"): Promise<OpResult> {
    const invokedMs = this.now();
    let seen: Map<string, string> | undefined;
    let result: OpResult;
    let reason: string | undefined;
    try {
      seen = await call();
      result = "ok";
    } catch (err) {
      result = classify(err);
      reason = reasonOf(err);
    }
    const completedMs = this.now();
    for (const key of keys) {
      this.ops.push({ id: this.nextId++, client, kind: "read", key, invokedMs, completedMs, result, ...(seen ? { value: seen.get(key) ?? null } : {}), ...(reason !== undefined ? { reason } : {}) });
    }
    return result;
  }
}

/**
 * What the operations invoked from `since` on came to, in one line: writes
 * and reads by result, the median and slowest acknowledged write, and the
 * commonest reasons a call did not succeed (a read of several keys counted
 * once, node IDs elided so that one cause counts as one). A run with few
 * acknowledged writes says why.
 */
export function tally(ops: readonly Op[], since = 0): string {
  const from = ops.filter((o) => o.invokedMs >= since);
  const count = (kind: Op["kind"], result: Op["result"]) => from.filter((o) => o.kind === kind && o.result === result).length;
  const okWrites = from
    .filter((o) => o.kind === "write" && o.result === "ok")
    .map((o) => o.completedMs - o.invokedMs)
    .sort((a, b) => a - b);
  const median = okWrites[Math.floor(okWrites.length / 2)];
  // One entry per call: a read's ops share their client and invocation time.
  const calls = new Map(from.filter((o) => o.reason !== undefined).map((o) => [`${o.kind} ${o.client} ${o.invokedMs}`, o.reason!.replace(/\b[0-9a-f]{16}\b/g, "…").slice(0, 160)]));
  const reasons = new Map<string, number>();
  for (const reason of calls.values()) reasons.set(reason, (reasons.get(reason) ?? 0) + 1);
  const commonest = [...reasons]
    .sort((a, b) => b[1] - a[1])
    .slice(0, 3)
    .map(([reason, n]) => `${n}× ${reason}`);
  return [
    `writes ${count("write", "ok")} ok, ${count("write", "failed")} failed, ${count("write", "unknown")} unknown`,
    `reads ${count("read", "ok")} ok, ${count("read", "failed")} failed, ${count("read", "unknown")} unknown (per key)`,
    ...(median !== undefined ? [`acknowledged writes took ${Math.round(median)} ms (median), ${Math.round(okWrites.at(-1)!)} ms (slowest)`] : []),
    ...(commonest.length ? [`calls that did not succeed: ${commonest.join("; ")}`] : []),
  ].join("; ");
}
