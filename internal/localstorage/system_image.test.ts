// What the booted slot's command line says about its system image, and what
// a node refuses to believe from it.

import { describe, expect, test } from "bun:test";
import { formatSystemImageParameter, parseSystemImageParameter, readBootSelection } from "./mod.ts";

const HASH = "a930237736f954be71889d19a9d0182587188b7c6d60eb79de0d01abb49872c3";

describe("the boot selection on the command line", () => {
  test("names the slot, the trial and the system image the slot choice and the build put there", () => {
    const line = `console=ttyS0 panic=-1 ${formatSystemImageParameter({ dataBlocks: 733, hashOffset: 3002368, rootHash: HASH })} nodecore.slot=b nodecore.trial=1`;
    expect(readBootSelection(line)).toEqual({ slot: "b", trial: true, system: { dataBlocks: 733, hashOffset: 3002368, rootHash: HASH }, systemError: undefined });
  });

  test("carries the slot's own trial bound, kept within its limits", () => {
    expect(readBootSelection("nodecore.slot=a nodecore.trial_bound_s=60")?.trialBoundS).toBe(60);
    expect(readBootSelection("nodecore.slot=a nodecore.trial_bound_s=1")?.trialBoundS).toBe(30);
    expect(readBootSelection("nodecore.slot=a nodecore.trial_bound_s=99999")?.trialBoundS).toBe(3600);
    expect(readBootSelection("nodecore.slot=a nodecore.trial_bound_s=-5")?.trialBoundS).toBeUndefined();
  });

  test("is absent before the slot choice named a slot", () => {
    expect(readBootSelection("console=ttyS0 panic=-1")).toBeUndefined();
    expect(readBootSelection("nodecore.slot=c")).toBeUndefined();
  });

  test("keeps the slot but says why when the system image parameters are missing or bad", () => {
    expect(readBootSelection("nodecore.slot=a")).toMatchObject({ slot: "a", trial: false, system: undefined, systemError: "the command line has no nodecore.system=" });
    expect(readBootSelection(`nodecore.slot=a nodecore.system=1,0,${HASH}`)?.systemError).toContain("would overlap");
  });
});

describe("the system image parameters", () => {
  test.each([
    ["", "is not"],
    ["733,3002368", "is not"],
    [`733,3002368,${HASH.toUpperCase()}`, "is not"],
    [`733,3002368,${HASH}0`, "is not"],
    [`0,4096,${HASH}`, "out of range"],
    [`99999999,409600000000,${HASH}`, "out of range"],
    [`733,3002369,${HASH}`, "not block-aligned"],
    [`733,4096,${HASH}`, "would overlap"],
  ])("%p is refused (%s)", (value, why) => {
    expect(() => parseSystemImageParameter(value)).toThrow(why);
  });

  test("a refusal quotes a long value only in part", () => {
    expect(() => parseSystemImageParameter("x".repeat(5000))).toThrow(/^nodecore\.system is not .{0,160}$/);
  });
});
