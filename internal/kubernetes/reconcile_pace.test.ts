import { describe, expect, test } from "bun:test";
import { ReconcilePace, recordsKey } from "./reconcile_pace.ts";

const limits = { tickMs: 5_000, resyncMs: 20_000, maxBackoffMs: 60_000 };

describe("the reconciler's passes", () => {
  test("the first tick passes; then only when the records change, another look is asked, or the resync is due", () => {
    const pace = new ReconcilePace(limits);
    expect(pace.due("a", 0)).toBe(true);
    pace.passed("a", 0, false);
    expect(pace.due("a", 5_000)).toBe(false);
    expect(pace.due("a", 15_000)).toBe(false);
    expect(pace.due("b", 5_000)).toBe(true);
    expect(pace.due("a", 20_000)).toBe(true);
    pace.passed("a", 20_000, true);
    expect(pace.due("a", 25_000)).toBe(true);
    pace.passed("a", 25_000, false);
    expect(pace.due("a", 30_000)).toBe(false);
  });

  test("failed passes back off, doubling from a tick up to the bound, whatever the records do; one that passes ends the streak", () => {
    const pace = new ReconcilePace(limits);
    pace.passed("a", 0, false);
    const waits = [1, 2, 3, 4, 5, 6].map(() => pace.failed(100_000));
    expect(waits).toEqual([5_000, 10_000, 20_000, 40_000, 60_000, 60_000]);
    expect(pace.due("changed", 159_999)).toBe(false);
    expect(pace.due("a", 160_000)).toBe(true);
    expect(pace.passed("a", 160_000, false)).toBe(6);
    expect(pace.failures).toBe(0);
    expect(pace.due("a", 165_000)).toBe(false);
  });

  test("the records' key ignores order and changes with an address, a worker or a node", () => {
    const key = (workers: [string, string][], known: string[]) => recordsKey({ workers: new Map(workers), known: new Set(known) });
    const base = key(
      [
        ["n1", "10.0.0.1"],
        ["n2", "10.0.0.2"],
      ],
      ["n1", "n2", "n3"],
    );
    expect(
      key(
        [
          ["n2", "10.0.0.2"],
          ["n1", "10.0.0.1"],
        ],
        ["n3", "n2", "n1"],
      ),
    ).toBe(base);
    expect(
      key(
        [
          ["n1", "10.0.0.9"],
          ["n2", "10.0.0.2"],
        ],
        ["n1", "n2", "n3"],
      ),
    ).not.toBe(base);
    expect(key([["n1", "10.0.0.1"]], ["n1", "n2", "n3"])).not.toBe(base);
    expect(
      key(
        [
          ["n1", "10.0.0.1"],
          ["n2", "10.0.0.2"],
        ],
        ["n1", "n2"],
      ),
    ).not.toBe(base);
  });
});
