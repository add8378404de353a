// The checker's own tests: histories that must pass and histories that
// must fail, each the smallest that shows the point.

import { describe, expect, test } from "bun:test";
import { checkHistory, checkRegister } from "./checker.ts";
import type { Op, OpResult } from "./history.ts";
import { historyAtBackup } from "./restore_run.ts";

let nextId = 1;
const w = (value: string, from: number, to: number, result: OpResult = "ok", key = "k"): Op => ({ id: nextId++, client: 0, kind: "write", key, value, invokedMs: from, completedMs: to, result });
const r = (value: string | null, from: number, to: number, result: OpResult = "ok", key = "k"): Op => ({
  id: nextId++,
  client: 1,
  kind: "read",
  key,
  invokedMs: from,
  completedMs: to,
  result,
  ...(result === "ok" ? { value } : {}),
});
const final = (value: string | null, key = "k") => new Map([[key, [value, value, value]]]);

describe("histories that are fine", () => {
  test("many unknown writes that no read saw do not blow up the search", () => {
    // One client timing out 40 times in a row during an outage, while another reads the old value.
    const ops: Op[] = [w("0", 0, 1)];
    for (let i = 0; i < 40; i++) ops.push(w(`u${i}`, 10 + i * 10, 15 + i * 10, "unknown"), r("0", 12 + i * 10, 14 + i * 10));
    ops.push(w("1", 500, 501), r("1", 502, 503));
    expect(checkRegister("k", ops)).toBeUndefined();
  });

  test("a write, then a read of it", () => {
    expect(checkHistory([w("1", 0, 1), r("1", 2, 3)], final("1")).violations).toEqual([]);
  });

  test("a read overlapping a write may see the old value or the new, old before new", () => {
    expect(checkRegister("k", [w("1", 0, 10), r(null, 1, 2), r("1", 3, 4)])).toBeUndefined();
  });

  test("an unknown write may take effect after its client gave up, or never", () => {
    expect(checkRegister("k", [w("1", 0, 1, "unknown"), r(null, 2, 3), r("1", 4, 5)])).toBeUndefined();
    expect(checkRegister("k", [w("1", 0, 1, "unknown"), r(null, 2, 3)])).toBeUndefined();
    expect(checkHistory([w("1", 0, 1, "unknown")], final(null)).violations).toEqual([]);
  });

  test("an acknowledged write overwritten by a later one is not lost", () => {
    const result = checkHistory([w("1", 0, 1), w("2", 2, 3)], final("2"));
    expect(result.lost).toBe(0);
    expect(result.acknowledged).toBe(2);
  });

  test("failed reads and writes that nobody saw constrain nothing", () => {
    expect(checkHistory([w("1", 0, 1), w("2", 2, 3, "failed"), r(null, 4, 5, "failed"), r("1", 6, 7)], final("1")).violations).toEqual([]);
  });

  test("thirty overlapping operations on one key are checked", () => {
    const ops: Op[] = [];
    for (let i = 0; i < 15; i++) ops.push(w(`v${i}`, i * 10, i * 10 + 25));
    for (let i = 0; i < 15; i++) ops.push(r(i === 0 ? null : `v${i - 1}`, i * 10 + 1, i * 10 + 2));
    expect(checkRegister("k", ops)).toBeUndefined();
  });
});

describe("searches too large to finish", () => {
  test("are reported as undecided once they pass the state budget, not as violations", () => {
    // Unknown writes that reads did see can each go in many places.
    const ops: Op[] = [];
    for (let i = 0; i < 12; i++) ops.push(w(`u${i}`, i, i + 1, "unknown"));
    for (let i = 0; i < 12; i++) ops.push(r(`u${11 - i}`, 100 + i * 2, 101 + i * 2));
    expect(checkRegister("k", ops, 50)).toStartWith("undecided: ");
  });
});

describe("histories that must fail", () => {
  test("a lost acknowledged write", () => {
    const result = checkHistory([w("1", 0, 1)], final(null));
    expect(result.lost).toBe(3);
    expect(result.violations[0]!.message).toBe("acknowledged write k=1 (op " + (nextId - 1) + ") is lost: the end state has no such label");
  });

  test("an acknowledged write replaced by an older value at the end", () => {
    const result = checkHistory([w("1", 0, 1), w("2", 2, 3)], final("1"));
    expect(result.lost).toBe(3);
    expect(result.violations.every((v) => v.message.includes("k=2") && v.message.includes("the end state has k=1"))).toBe(true);
  });

  test("a stale read after a newer acknowledged write", () => {
    expect(checkRegister("k", [w("1", 0, 1), w("2", 2, 3), r("1", 4, 5)])).toContain("no order that respects real time");
  });

  test("a read that goes back in time, during a write", () => {
    expect(checkRegister("k", [w("1", 0, 10), r("1", 1, 2), r(null, 3, 4)])).toContain("no order that respects real time");
  });

  test("a read of a value that was never written", () => {
    expect(checkRegister("k", [w("1", 0, 1), r("7", 2, 3)])).toMatch(/saw 7, which no write wrote/);
  });

  test("a read of a value whose write failed", () => {
    expect(checkRegister("k", [w("1", 0, 1, "failed"), r("1", 2, 3)])).toMatch(/saw 1, written by a write that failed/);
  });

  test("one operation answered twice with different results", () => {
    const op = w("1", 0, 1);
    const twice = { ...op, result: "failed" as const };
    const result = checkHistory([op, twice], final("1"));
    expect(result.duplicates).toBe(1);
    expect(result.violations[0]!.kind).toBe("duplicate");
  });

  test("curators that disagree at the end: each one without the write counts", () => {
    const result = checkHistory([w("1", 0, 1)], new Map([["k", ["1", null, "1"]]]));
    expect(result.lost).toBe(1);
  });
});

describe("a history cut at a backup taken between 100 and 200 (restore_run.ts)", () => {
  const one = (value: string | null) => new Map([["k", [value]]]);
  test("a write acknowledged before the backup began must be in the restored state", () => {
    const cut = historyAtBackup([w("1", 0, 50), w("2", 300, 310)], 100, 200);
    expect(checkHistory(cut, one(null)).lost).toBe(1);
    expect(checkHistory(cut, one("1")).violations).toEqual([]);
    // Written after the backup ended: it cannot be in it.
    expect(checkHistory(cut, one("2")).violations).not.toEqual([]);
  });

  test("a write acknowledged while the backup ran may be in it or not; a later read that saw it does not count", () => {
    const cut = historyAtBackup([w("1", 0, 50), w("2", 90, 150), r("2", 160, 170)], 100, 200);
    expect(checkHistory(cut, one("1")).violations).toEqual([]);
    expect(checkHistory(cut, one("2")).violations).toEqual([]);
  });
});
