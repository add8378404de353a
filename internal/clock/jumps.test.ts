// Clock jumps, seen against a monotonic clock, from clocks the test sets.

import { describe, expect, test } from "bun:test";
import { captureLogger } from "../log/mod.ts";
import { supervise } from "../supervisor/mod.ts";
import { eventually } from "../testing/mod.ts";
import { clockWatch, jumpBetween, JUMP_MS } from "./jumps.ts";

describe("clock jumps", () => {
  test("the wall clock moving like the monotonic one is no jump; a step beyond the threshold is, either way", () => {
    const at = (wallMs: number, monoMs: number) => ({ wallMs, monoMs });
    expect(jumpBetween(at(1_000_000, 10), at(1_005_000, 5_010))).toBeUndefined();
    expect(jumpBetween(at(1_000_000, 10), at(1_005_000 + JUMP_MS, 5_010))).toBeUndefined();
    expect(jumpBetween(at(1_000_000, 10), at(1_005_000 + 3_600_000, 5_010))).toBe(3_600_000);
    expect(jumpBetween(at(1_000_000, 10), at(1_005_000 - 7_200_000, 5_010))).toBe(-7_200_000);
  });

  test("a jump is reported on the clock line and logged, and the watch goes on", async () => {
    let wall = 1_800_000_000_000;
    let mono = 0;
    const lines: string[] = [];
    const { logger, entries } = captureLogger("root");
    const supervisor = supervise(
      clockWatch({
        report: (state, message) => lines.push(`${state}: ${message}`),
        look: () => ({ wallMs: wall, monoMs: mono }),
        intervalMs: 10,
      }),
      { logger },
    );
    try {
      await eventually(() => expect(lines.length).toBe(1));
      wall += 2 * 3600_000;
      await eventually(() => expect(lines.length).toBe(2));
      expect(lines[1]).toBe("jumped: the wall clock jumped +7200.0 s at 2027-01-15T10:00:00.000Z; the curator leader says whether it is right now (CLOCK_SKEW)");
      expect(entries.some((e) => e.level === "warn" && e.message.startsWith("the wall clock jumped"))).toBe(true);
      mono += 10;
      wall += 10;
      await Bun.sleep(50);
      expect(lines.length).toBe(2);
    } finally {
      await supervisor.stop();
    }
  });
});
