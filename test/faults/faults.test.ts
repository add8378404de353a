// The short seeded fault run of CI: a three-node cluster of processes, one
// run per process-mode fault kind, while owner clients write and read
// labels. Nothing acknowledged may be lost, every key's history must be
// linearizable, no node process may die on its own, and the cluster must be
// healthy again within the bound after each fault. (`bun run faults` is the
// long form, and the only way to the qemu mode.)

import { describe, expect, test } from "bun:test";
import { PROCESS_FAULTS, runFaults } from "./mod.ts";

/** A fixed seed: a failure here replays with `bun run faults --seed 20261123 --runs 4`. */
const SEED = 20261123;

describe("the short fault run", () => {
  test("SIGKILL of etcd, of a node, of the leader's node, and a full data disk lose no acknowledged write, and reads never go back in time", async () => {
    const report = await runFaults({ mode: "process", seed: SEED, runs: PROCESS_FAULTS.length, firstHost: 250 });
    expect(report.check.violations).toEqual([]);
    expect(report.unexpectedExits).toEqual([]);
    // A full disk: etcd dies at most once, then waits for space (no crash loop).
    expect(report.runs.flatMap((r) => r.problems)).toEqual([]);
    expect(report.runs.map((r) => r.kind)).toEqual([...PROCESS_FAULTS]);
    for (const run of report.runs) {
      // Writes went on in every run, and the cluster was back within RECOVERY_BOUND_MS (undefined: it was not).
      expect({ kind: run.kind, acknowledged: run.check.acknowledged > 0, recovered: run.recoveryMs !== undefined }).toEqual({ kind: run.kind, acknowledged: true, recovered: true });
    }
  }, 400_000);
});
