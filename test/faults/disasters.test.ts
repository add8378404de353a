// The disaster fault kinds in CI, each on a cluster of its own:
//  - quorum-loss: two of three consensus nodes lost for good under a
//    workload, and `ctl cluster recover` from the survivor (quorum_loss.ts);
//  - restore: every node down and the only consensus node lost for good
//    after a backup taken under a workload, and the cluster restored from
//    it (restore_run.ts).
// `bun run faults --kinds quorum-loss,restore --seed 20261125` replays them.

import { expect, test } from "bun:test";
import { runQuorumLoss } from "./quorum_loss.ts";
import { runRestore } from "./restore_run.ts";

/** A fixed seed: a failure replays with the same pauses. */
const SEED = 20261125;

test("two of three consensus nodes lost for good: recover from the survivor refuses while the quorum answers, then loses no acknowledged write and takes writes again", async () => {
  const report = await runQuorumLoss({ seed: SEED, firstHost: 70 });
  expect(report.refusedWithQuorum).toContain("still has a quorum");
  // The plan comes before the first step, and names every member removed.
  const started = report.ctlSaid.findIndex((l) => l.includes("recovery started"));
  expect(started).toBeGreaterThan(0);
  expect(report.ctlSaid[0]).toStartWith(`ctl: survivor: ${report.survivor} `);
  for (const lost of report.lost) expect(report.ctlSaid.slice(0, started).some((l) => l.includes(`its consensus role dropped: ${lost} `))).toBe(true);
  expect(report.ctlSaid.at(-1)).toMatch(/^ctl: the cluster takes writes again, [\d.]+ s after the request$/);
  expect(report.check.violations).toEqual([]);
  expect(report.check.acknowledged).toBeGreaterThan(0);
  expect(report.etcdMembers).toEqual([report.survivor]);
  expect(report.consensusRecords).toEqual([report.survivor]);
  expect(report.unexpectedExits).toEqual([]);
  expect(report.firstWriteMs).toBeDefined();
}, 300_000);

test("every node down after a backup taken under writes, the consensus node for good: a damaged copy is refused, the restore holds every write acknowledged before the backup, and the other nodes open their own disks", async () => {
  const report = await runRestore({ seed: SEED, firstHost: 90 });
  expect(report.refusedDamaged).toMatch(/damaged\.backup: frame \d+ /);
  expect(report.ackedBeforeBackup).toBeGreaterThan(0);
  expect(report.check.violations).toEqual([]);
  expect(report.rejoined.sort()).toEqual(report.expectedBack.sort());
  expect(report.etcdMembers).toEqual([report.restoredId]);
  expect(report.unexpectedExits).toEqual([]);
}, 300_000);
