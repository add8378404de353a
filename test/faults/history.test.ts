// The recorder and its one-line tally: what a fault run logs about the
// calls its clients made, driven by a clock the test moves.

import { describe, expect, test } from "bun:test";
import { HistoryRecorder, tally } from "./history.ts";

/** A recorder on a clock that only moves when the test says. */
function recorder() {
  const clock = { now: 0 };
  return { clock, history: new HistoryRecorder(() => clock.now) };
}

const unknown = () => "unknown" as const;
const failed = () => "failed" as const;

describe("HistoryRecorder", () => {
  test("a write keeps its times, its result and, when it threw, the first line of why", async () => {
    const { clock, history } = recorder();
    await history.write(0, "k", "v1", async () => void (clock.now += 40), unknown);
    await history.write(
      1,
      "k",
      "v2",
      async () => {
        clock.now += 10;
        throw new Error("deadline exceeded\n    at somewhere (stack)");
      },
      unknown,
    );
    expect(history.ops).toEqual([
      { id: 1, client: 0, kind: "write", key: "k", value: "v1", invokedMs: 0, completedMs: 40, result: "ok" },
      { id: 2, client: 1, kind: "write", key: "k", value: "v2", invokedMs: 40, completedMs: 50, result: "unknown", reason: "deadline exceeded" },
    ]);
  });

  test("a read of several keys is one op per key, each with what it saw (null when absent), or each with the reason", async () => {
    const { history } = recorder();
    await history.read(0, ["a", "b"], async () => new Map([["a", "x"]]), unknown);
    await history.read(0, ["a", "b"], async () => Promise.reject(new Error("not the leader")), failed);
    expect(history.ops.map((o) => [o.key, o.result, o.kind === "read" ? o.value : "", o.reason])).toEqual([
      ["a", "ok", "x", undefined],
      ["b", "ok", null, undefined],
      ["a", "failed", undefined, "not the leader"],
      ["b", "failed", undefined, "not the leader"],
    ]);
  });
});

describe("tally", () => {
  test("counts by kind and result, gives the median and slowest acknowledged write, and the commonest reasons", async () => {
    const { clock, history } = recorder();
    for (const ms of [100, 300, 200]) await history.write(0, "k", `v${ms}`, async () => void (clock.now += ms), unknown);
    for (let i = 0; i < 3; i++) {
      await history.write(
        1,
        "k",
        `u${i}`,
        async () => {
          clock.now += 5;
          throw new Error("call to 10.0.0.1:7835: deadline exceeded");
        },
        unknown,
      );
    }
    await history.write(
      2,
      "k",
      "f",
      async () => {
        clock.now += 5;
        throw new Error("not the leader");
      },
      failed,
    );
    // One failed read of three keys is one call that did not succeed, not three.
    await history.read(
      2,
      ["a", "b", "c"],
      async () => {
        clock.now += 5;
        throw new Error("not the leader");
      },
      failed,
    );
    await history.read(2, ["a"], async () => new Map(), unknown);
    expect(tally(history.ops)).toBe(
      "writes 3 ok, 1 failed, 3 unknown; reads 1 ok, 3 failed, 0 unknown (per key); " +
        "acknowledged writes took 200 ms (median), 300 ms (slowest); " +
        "calls that did not succeed: 3× call to 10.0.0.1:7835: deadline exceeded; 2× not the leader",
    );
  });

  test("counts only what was invoked from `since` on, and leaves out the parts it has nothing for", async () => {
    const { clock, history } = recorder();
    await history.write(0, "k", "early", async () => void (clock.now += 10), unknown);
    const since = clock.now;
    await history.write(
      0,
      "k",
      "late",
      async () => {
        clock.now += 10;
        throw new Error("no curator answered");
      },
      unknown,
    );
    expect(tally(history.ops, since)).toBe("writes 0 ok, 0 failed, 1 unknown; reads 0 ok, 0 failed, 0 unknown (per key); calls that did not succeed: 1× no curator answered");
    expect(tally([])).toBe("writes 0 ok, 0 failed, 0 unknown; reads 0 ok, 0 failed, 0 unknown (per key)");
  });

  test("one cause on different nodes counts as one (node IDs elided), and a long reason is cut", async () => {
    const { clock, history } = recorder();
    for (const id of ["0123456789abcdef", "fedcba9876543210"]) {
      await history.write(
        0,
        "k",
        id,
        async () => {
          clock.now += 1;
          throw new Error(`node node-${id} is not listed ${"x".repeat(300)}`);
        },
        unknown,
      );
    }
    const line = tally(history.ops);
    expect(line).toContain("2× node node-… is not listed ");
    expect(line.length).toBeLessThan(300);
  });
});
