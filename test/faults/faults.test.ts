// The short seeded fault run of CI: a three-node cluster of processes, one
// run per fault kind, while owner clients write and read labels. Nothing
// acknowledged may be lost, every key's history must be linearizable, no
// node process may die on its own, and the cluster must be healthy again
// within the bound after each fault. (`bun run faults` is the long form.)

import { describe, expect, test } from "bun:test";
import { FAULT_KINDS, runFaults } from "./runner.ts";

/** A fixed seed: a failure here replays with `bun run faults --seed 20261123 --runs 2`. */
const SEED = 20261123;

describe("the short fault run", () => {
  test("SIGKILL of etcd and of a whole node process lose no acknowledged write, and reads never go back in time", async () => {
    const report = await runFaults({ seed: SEED, runs: FAULT_KINDS.length, firstHost: 250 });
    expect(report.check.violations).toEqual([]);
    expect(report.check.acknowledged).toBeGreaterThan(0);
    expect(report.unexpectedExits).toEqual([]);
    expect(report.runs.map((r) => r.kind)).toEqual([...FAULT_KINDS]);
    // Back to healthy within RECOVERY_BOUND_MS after each fault: undefined means it was not.
    for (const run of report.runs) expect({ kind: run.kind, recovered: run.recoveryMs !== undefined }).toEqual({ kind: run.kind, recovered: true });
  }, 300_000);
});
