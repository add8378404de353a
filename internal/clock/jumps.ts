// Clock jumps: every LOOK_INTERVAL_MS the node reads its wall clock and its
// monotonic clock. Between two looks both should advance alike; a
// difference beyond JUMP_MS means the wall clock was set (by hand, by an
// NTP step, by a hypervisor resuming the VM). It is reported, never fatal:
// a warning in the log and the "clock" service line, which ctl node
// describe shows. Whether the clock is now right is the curator leader's
// to say (CLOCK_SKEW).

import type { Runnable } from "../supervisor/mod.ts";
import { sleep } from "../supervisor/mod.ts";

/** The service line this watch reports. */
export const CLOCK_LINE = "clock";
/** A difference between the two clocks' advance beyond this is a jump. */
export const JUMP_MS = 2_000;
export const LOOK_INTERVAL_MS = 5_000;

export interface ClockLook {
  /** Date.now() */
  wallMs: number;
  /** performance.now() */
  monoMs: number;
}

/** How far the wall clock moved beyond the monotonic one between two looks, if that is a jump. */
export function jumpBetween(before: ClockLook, after: ClockLook, thresholdMs = JUMP_MS): number | undefined {
  const step = after.wallMs - before.wallMs - (after.monoMs - before.monoMs);
  return Math.abs(step) > thresholdMs ? step : undefined;
}

export function clockWatch(options: { report: (state: string, message: string) => void; look?: () => ClockLook; intervalMs?: number }): Runnable {
  const look = options.look ?? (() => ({ wallMs: Date.now(), monoMs: performance.now() }));
  return async (ctx) => {
    ctx.signalHealthy();
    let before = look();
    let jumps = 0;
    options.report("running", "no jump of the wall clock seen");
    for (;;) {
      await sleep(options.intervalMs ?? LOOK_INTERVAL_MS, ctx.signal);
      const now = look();
      const step = jumpBetween(before, now);
      before = now;
      if (step === undefined) continue;
      jumps++;
      const said = `${step > 0 ? "+" : "-"}${(Math.abs(step) / 1000).toFixed(1)} s`;
      ctx.logger.warn("the wall clock jumped: it was set, and moved unlike the monotonic clock", { step: said, at: new Date(now.wallMs).toISOString() });
      options.report(
        "jumped",
        `the wall clock jumped ${said} at ${new Date(now.wallMs).toISOString()}${jumps > 1 ? ` (${jumps} jumps this boot)` : ""}; the curator leader says whether it is right now (CLOCK_SKEW)`,
      );
    }
  };
}
