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
