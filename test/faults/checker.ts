// The fault suite's checks over a recorded history (history.ts). Each label
// key is a register: writes set a value no other write uses, reads return
// the value or absent (null).
//
//   history ──▶ duplicates: one operation id, two different results
//           ──▶ lost: an acknowledged write whose value is gone at the end,
//               although no write that could come after it is there instead
//           ──▶ linearizable, per key (Wing & Gong's search): is there one
//               order of the operations that respects real time (an
//               operation that completed before another was invoked comes
//               first) in which every read returns the latest write?
//
// Unknown writes may take effect at any time after they were invoked, or
// never; failed writes never take effect, so a read that sees one is a
// violation; reads that did not return ok constrain nothing. The search
// memoises (set of operations done, register value), so a key's history of
// a few dozen overlapping operations is checked in milliseconds.
//
// Unknown writes are where the search could explode: each may or may not
// have happened, at any later point, so k of them open 2^k states. An
// unknown write whose value no read returned is left out (if some order
// has it, the same order without it is just as good: no read sees the
// difference), which leaves the few that a read proves happened. A key
// whose search still passes STATE_BUDGET states is reported as undecided,
// never left to run for hours (a qemu run's outage once made it so).

import type { Op, ReadOp, WriteOp } from "./history.ts";

export interface Violation {
  kind: "duplicate" | "lost" | "not-linearizable";
  key?: string;
  message: string;
}

/** Search states one key may take before it is reported as undecided. */
export const STATE_BUDGET = 500_000;

export interface CheckResult {
  /** Writes that returned ok. */
  acknowledged: number;
  /** Keys whose linearizability search passed STATE_BUDGET: neither proven nor refuted. */
  undecided: string[];
  lost: number;
  linearizabilityViolations: number;
  duplicates: number;
  violations: Violation[];
}

/** Operations that were recorded twice under one id with different outcomes. */
function duplicateResults(ops: readonly Op[]): Violation[] {
  const first = new Map<number, Op>();
  const violations: Violation[] = [];
  for (const op of ops) {
    const seen = first.get(op.id);
    if (!seen) {
      first.set(op.id, op);
      continue;
    }
    const same = seen.result === op.result && (seen.kind !== "read" || op.kind !== "read" || seen.value === op.value);
    if (!same) violations.push({ kind: "duplicate", key: op.key, message: `operation ${op.id} on ${op.key} was answered twice: ${seen.result} and ${op.result}` });
  }
  return violations;
}

/**
 * Acknowledged writes lost: `final` is each key's value at the end (read
 * from every curator; all must agree, or each disagreeing curator counts).
 */
function lostWrites(writes: readonly WriteOp[], final: ReadonlyMap<string, readonly (string | null)[]>): Violation[] {
  const violations: Violation[] = [];
  for (const write of writes) {
    if (write.result !== "ok") continue;
    // Writes to the same key that may have taken effect after this one.
    const later = new Set(writes.filter((w) => w.key === write.key && w.result !== "failed" && w !== write && (w.result === "unknown" || w.completedMs > write.invokedMs)).map((w) => w.value));
    for (const value of final.get(write.key) ?? [null]) {
      if (value === write.value || (value !== null && later.has(value))) continue;
      violations.push({
        kind: "lost",
        key: write.key,
        message: `acknowledged write ${write.key}=${write.value} (op ${write.id}) is lost: the end state has ${value === null ? "no such label" : `${write.key}=${value}`}`,
      });
    }
  }
  return violations;
}

/** How an undecided key's message begins. */
export const UNDECIDED = "undecided";

interface Entry {
  op: WriteOp | ReadOp;
  /** Completion time; Infinity for an unknown write (it may take effect at any later time). */
  returnMs: number;
  optional: boolean;
}

/** Thrown inside the search when it passes the budget. */
class BudgetExceeded extends Error {}

/**
 * Whether one key's operations can be ordered as a register's: undefined
 * if they can, why not if they cannot, or UNDECIDED when the search passed
 * `budget` states.
 */
export function checkRegister(key: string, ops: readonly Op[], budget = STATE_BUDGET): string | undefined {
  const failedValues = new Set(ops.filter((o): o is WriteOp => o.kind === "write" && o.result === "failed").map((o) => o.value));
  const written = new Set(ops.filter((o): o is WriteOp => o.kind === "write").map((o) => o.value));
  const read = new Set(ops.filter((o): o is ReadOp => o.kind === "read" && o.result === "ok").map((o) => o.value ?? null));
  const entries: Entry[] = [];
  for (const op of ops) {
    if (op.kind === "write" && op.result === "unknown" && !read.has(op.value)) continue;
    if (op.kind === "write" && op.result !== "failed") entries.push({ op, returnMs: op.result === "ok" ? op.completedMs : Number.POSITIVE_INFINITY, optional: op.result === "unknown" });
    if (op.kind === "read" && op.result === "ok") {
      const value = op.value ?? null;
      if (value !== null && failedValues.has(value)) return `read of ${key} (op ${op.id}) saw ${value}, written by a write that failed`;
      if (value !== null && !written.has(value)) return `read of ${key} (op ${op.id}) saw ${value}, which no write wrote`;
      entries.push({ op, returnMs: op.completedMs, optional: false });
    }
  }
  entries.sort((a, b) => a.op.invokedMs - b.op.invokedMs);
  const n = entries.length;
  const done = new Uint8Array(n);
  const visited = new Set<string>();
  let furthest = 0;

  const search = (value: string | null, count: number): boolean => {
    if (entries.every((e, i) => done[i] || e.optional)) return true;
    const memo = `${value}\u0000${done.join("")}`;
    if (visited.has(memo)) return false;
    visited.add(memo);
    if (visited.size > budget) throw new BudgetExceeded();
    furthest = Math.max(furthest, count);
    // Only an operation invoked before every pending one's completion can go next.
    let horizon = Number.POSITIVE_INFINITY;
    for (let i = 0; i < n; i++) if (!done[i] && !entries[i]!.optional) horizon = Math.min(horizon, entries[i]!.returnMs);
    for (let i = 0; i < n; i++) {
      if (done[i]) continue;
      const entry = entries[i]!;
      if (entry.op.invokedMs > horizon) break;
      if (entry.op.kind === "read" && (entry.op.value ?? null) !== value) continue;
      done[i] = 1;
      const ok = search(entry.op.kind === "write" ? entry.op.value : value, count + 1);
      done[i] = 0;
      if (ok) return true;
    }
    return false;
  };
  try {
    if (search(null, 0)) return undefined;
  } catch (err) {
    if (err instanceof BudgetExceeded) return `${UNDECIDED}: the ${n} operations on ${key} passed ${budget} search states`;
    throw err;
  }
  return `the ${n} operations on ${key} have no order that respects real time in which every read sees the latest write (at best ${furthest} of them fit)`;
}

/**
 * Runs every check. `final` maps each key to the values every curator
 * reported for it at the end (one entry per curator).
 */
export function checkHistory(ops: readonly Op[], final: ReadonlyMap<string, readonly (string | null)[]>): CheckResult {
  const duplicates = duplicateResults(ops);
  const unique = [...new Map(ops.map((o) => [o.id, o])).values()];
  const writes = unique.filter((o): o is WriteOp => o.kind === "write");
  const lost = lostWrites(writes, final);
  const byKey = new Map<string, Op[]>();
  for (const op of unique) byKey.set(op.key, [...(byKey.get(op.key) ?? []), op]);
  const linearizability: Violation[] = [];
  const undecided: string[] = [];
  for (const [key, keyOps] of byKey) {
    const problem = checkRegister(key, keyOps);
    if (problem?.startsWith(UNDECIDED)) undecided.push(problem);
    else if (problem) linearizability.push({ kind: "not-linearizable", key, message: problem });
  }
  return {
    acknowledged: writes.filter((w) => w.result === "ok").length,
    undecided,
    lost: lost.length,
    linearizabilityViolations: linearizability.length,
    duplicates: duplicates.length,
    violations: [...duplicates, ...lost, ...linearizability],
  };
}
