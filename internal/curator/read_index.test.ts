// Read-index batching with a check the test answers by hand.

import { describe, expect, test } from "bun:test";
import { eventually } from "../testing/mod.ts";
import { ReadIndex } from "./read_index.ts";

/** A check that counts its calls and waits for the test to answer each. */
function manualCheck() {
  const sent: PromiseWithResolvers<number>[] = [];
  const index = new ReadIndex(() => {
    const call = Promise.withResolvers<number>();
    sent.push(call);
    return call.promise;
  });
  return { index, sent, answer: (i: number) => sent[i]!.resolve(i), fail: (i: number) => sent[i]!.reject(new Error(`check ${i} failed`)) };
}

describe("read index", () => {
  test("a caller gets a check sent after it asked, shared with everyone who asked meanwhile", async () => {
    const { index, sent, answer } = manualCheck();
    const a = index.next();
    expect(sent.length).toBe(1);
    // Check 0 is in flight: it may have been answered before b and c began.
    const b = index.next();
    const c = index.next();
    expect(sent.length).toBe(1);
    answer(0);
    expect(await a).toBe(0);
    await eventually(() => sent.length === 2, { what: "check 1 sent" });
    const d = index.next();
    answer(1);
    expect(await b).toBe(1);
    expect(await c).toBe(1);
    await eventually(() => sent.length === 3, { what: "check 2 sent" });
    answer(2);
    expect(await d).toBe(2);
    expect(sent.length).toBe(3);
    // Nothing in flight: the next caller's check goes out at once.
    const e = index.next();
    expect(sent.length).toBe(4);
    answer(3);
    expect(await e).toBe(3);
  });

  test("a failed check fails its callers only, and the queued check is sent all the same", async () => {
    const { index, sent, answer, fail } = manualCheck();
    const a = index.next();
    const b = index.next();
    fail(0);
    await expect(a).rejects.toThrow("check 0 failed");
    await eventually(() => sent.length === 2, { what: "check 1 sent" });
    answer(1);
    expect(await b).toBe(1);
  });
});
