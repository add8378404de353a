import { describe, expect, test } from "bun:test";
import { settleBounded } from "./bounded.ts";

describe("settleBounded", () => {
  test("runs at most the limit at once, keeps the items' order, and one failure stops no other", async () => {
    let running = 0;
    let most = 0;
    const told: string[] = [];
    const results = await settleBounded(
      [30, 5, 20, 1, 10, 2],
      3,
      async (ms) => {
        running++;
        most = Math.max(most, running);
        await Bun.sleep(ms);
        running--;
        if (ms === 20) throw new Error("the third failed");
        return ms * 2;
      },
      (ms, result) => told.push(`${ms}:${result.ok}`),
    );
    expect(most).toBe(3);
    expect(results).toEqual([
      { ok: true, value: 60 },
      { ok: true, value: 10 },
      { ok: false, error: new Error("the third failed") },
      { ok: true, value: 2 },
      { ok: true, value: 20 },
      { ok: true, value: 4 },
    ]);
    // Told as each finished: the short ones first, not in the items' order.
    expect(told).toHaveLength(6);
    expect(told[0]).toBe("5:true");
    expect(told).toContain("20:false");
  });

  test("a thrown non-Error becomes an Error; no items, no calls; a bad limit is refused", async () => {
    expect(
      await settleBounded([1], 1, async () => {
        throw "plain";
      }),
    ).toEqual([{ ok: false, error: new Error("plain") }]);
    expect(await settleBounded([], 4, async () => 1)).toEqual([]);
    expect(settleBounded([1], 0, async () => 1)).rejects.toThrow("limit: 0, not a whole number of at least 1");
  });
});
