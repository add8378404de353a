import { describe, expect, test } from "bun:test";
import { backFromPowerOff, cordonMark, CORDONED_BY_ANNOTATION, parseCordonMark, uncordonPatch, type CordonedNode } from "./node_cordon.ts";

const T = Date.parse("2026-11-29T05:00:00.000Z");

function node(mark: string | undefined, ready: { status: string; since: number } | undefined, unschedulable = true): CordonedNode {
  return {
    metadata: { name: "n", ...(mark !== undefined ? { annotations: { [CORDONED_BY_ANNOTATION]: mark } } : {}) },
    spec: unschedulable ? { unschedulable: true } : {},
    status: { conditions: ready ? [{ type: "Ready", status: ready.status, lastTransitionTime: new Date(ready.since).toISOString() }] : [] },
  };
}

describe("a cordon a ctl command made, and the power-off's taken back by the controller", () => {
  test("the mark is written and read back; anything else is no mark", () => {
    expect(cordonMark("ctl node reboot", T)).toBe("ctl node reboot at 2026-11-29T05:00:00.000Z");
    expect(parseCordonMark(cordonMark("ctl node poweroff", T))).toEqual({ by: "ctl node poweroff", atMs: T });
    for (const bad of [undefined, "", "ctl node poweroff", "ctl node poweroff at yesterday", " at 2026-11-29T05:00:00.000Z", `${"x".repeat(200)} at 2026-11-29T05:00:00.000Z`])
      expect(parseCordonMark(bad)).toBeUndefined();
  });

  test("a power-off's Node Ready again since after the mark is back; before it, not Ready, another command's mark, an operator's cordon, or no cordon is not", () => {
    const poweroff = cordonMark("ctl node poweroff", T);
    expect(backFromPowerOff(node(poweroff, { status: "True", since: T + 60_000 }))).toBe(true);
    expect(backFromPowerOff(node(poweroff, { status: "True", since: T - 1_000 }))).toBe(false);
    expect(backFromPowerOff(node(poweroff, { status: "Unknown", since: T + 60_000 }))).toBe(false);
    expect(backFromPowerOff(node(poweroff, undefined))).toBe(false);
    expect(backFromPowerOff(node(cordonMark("ctl node reboot", T), { status: "True", since: T + 60_000 }))).toBe(false);
    expect(backFromPowerOff(node(undefined, { status: "True", since: T + 60_000 }))).toBe(false);
    expect(backFromPowerOff(node(poweroff, { status: "True", since: T + 60_000 }, false))).toBe(false);
  });

  test("the uncordon patch tests the mark it read, removes it and makes the Node schedulable", () => {
    expect(uncordonPatch("ctl node poweroff at 2026-11-29T05:00:00.000Z")).toEqual([
      { op: "test", path: "/metadata/annotations/nodecore.dev~1cordoned-by", value: "ctl node poweroff at 2026-11-29T05:00:00.000Z" },
      { op: "remove", path: "/metadata/annotations/nodecore.dev~1cordoned-by" },
      { op: "add", path: "/spec/unschedulable", value: false },
    ]);
  });
});
