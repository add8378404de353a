import { expect, test } from "bun:test";
import { leftOutLine, RefusalBudget } from "./refusal_budget.ts";

test("refusals are let through per caller and overall in a minute of the clock; the next minute says what the last one left out, once", () => {
  let now = 60_000 * 1000;
  const budget = new RefusalBudget(2, 5, () => now);
  const admitted = (caller: string) => budget.admit(caller).admit;
  expect([admitted("a"), admitted("a"), admitted("a")]).toEqual([true, true, false]);
  expect([admitted("b"), admitted("b"), admitted("c")]).toEqual([true, true, true]);
  // Five in all: d's first is over the overall bound.
  expect(admitted("d")).toBe(false);
  now += 60_000;
  const next = budget.admit("e");
  expect(next).toEqual({ admit: true, leftOut: { refusals: 2, callers: 2, atLeast: false } });
  expect(leftOutLine(next.leftOut!)).toBe("and 2 more refused calls from 2 callers in that minute, not recorded one by one");
  // Said once: the rest of the minute, nothing left out is repeated.
  expect(budget.admit("a")).toEqual({ admit: true });
  now += 60_000;
  expect(budget.admit("a")).toEqual({ admit: true });
});

test("a flood from many callers costs the overall bound, and its count names them", () => {
  let now = 0;
  const budget = new RefusalBudget(5, 60, () => now);
  let admitted = 0;
  for (let i = 0; i < 2100; i++) for (let j = 0; j < 6; j++) if (budget.admit(`10.0.${i >> 8}.${i & 255}`).admit) admitted++;
  expect(admitted).toBe(60);
  now = 60_000;
  const { leftOut } = budget.admit("x");
  expect(leftOut).toEqual({ refusals: 2100 * 6 - 60, callers: 2100, atLeast: false });
});
