// Seeds that once found a failure, replayed. A fault's timing against the
// cluster's own is not reproducible to the millisecond, so a replay is the
// same schedule of faults (order, victims, pauses), not the same
// interleaving: it guards the fix by running the schedule that exposed it.
//
// seed 42, etcd-kill and node-kill in turn (2026-11-23, the first 20-run):
//   one member's copy of an acknowledged write was older than the write at
//   the end of the run. The end state had been read (serializable) from a
//   member still catching up after the last fault; the runner now waits
//   for every member to reach the committed revision before it reads a
//   copy, and since then reads the copies after every run, so each run of
//   this replay takes that path. (The same 20-run also led to the curator's
//   "term ended" error saying that the write may have been made; its unit
//   test is in internal/curator/curator.test.ts.)

import { describe, expect, test } from "bun:test";
import { runFaults } from "./mod.ts";

describe("fault seeds that found failures", () => {
  test("seed 42 (etcd-kill, node-kill): every member's copy, read after it caught up, has every acknowledged write", async () => {
    const report = await runFaults({ mode: "process", seed: 42, runs: 6, kinds: ["etcd-kill", "node-kill"], firstHost: 230 });
    expect(report.check.violations).toEqual([]);
    expect(report.unexpectedExits).toEqual([]);
    expect(report.check.acknowledged).toBeGreaterThan(0);
    for (const run of report.runs) expect({ run: report.runs.indexOf(run) + 1, recovered: run.recoveryMs !== undefined }).toEqual({ run: report.runs.indexOf(run) + 1, recovered: true });
  }, 400_000);
});
