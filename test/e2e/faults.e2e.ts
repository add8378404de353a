// The fault suite's qemu mode, replaying the seed that found a failure: the
// plug pulled on a VM seconds after it became a consensus member (seed 11,
// vm-power, 2026-11-23). The node then came back with an empty certificate
// file, written before the cut but never synced, and could not start again;
// files the node must find after a power cut are now written durably
// (internal/localstorage/durable_file.ts). Later it came back with an ESP
// whose every read failed ("invalid cluster chain"), or a sealed
// configuration of zeros: on FAT a file renamed over another kept the old
// directory entry on disk, naming freed clusters, until its inode's
// writeback; the ESP is now mounted with dirsync (localstorage mountESP).
// When the cluster does not come back, the run prints each VM's last
// lines. The rest of the qemu mode
// (partition, slow-network) runs by hand: `bun run faults --mode qemu`.

import { QEMU_RECOVERY_BOUND_MS, runFaults } from "../faults/mod.ts";
import { assert, assertEqual, e2eTest } from "./harness.ts";

e2eTest("a VM whose plug is pulled right after it joined consensus comes back UP, and no acknowledged write is lost (fault seed 11)", async (ctx) => {
  const report = await runFaults({ mode: "qemu", seed: 11, runs: 1, kinds: ["vm-power"], imageDir: ctx.imageDir, log: (line) => ctx.logger.info(line) });
  const run = report.runs[0]!;
  assertEqual(run.problems.join("; "), "", "problems the run saw");
  assertEqual(report.check.violations.map((v) => v.message).join("; "), "", "violations");
  assert(report.check.acknowledged > 0, "no write was acknowledged during the run");
  assertEqual(report.unexpectedExits.join(", "), "", "VMs that stopped or panicked on their own");
  assert(run.recoveryMs !== undefined, `${run.victim} did not come back, or the cluster was not healthy, within ${QEMU_RECOVERY_BOUND_MS / 1000} s of its power-on; last: ${run.stillFailing}`);
  ctx.report(`vm-power (seed 11) on ${run.victim}: healthy again ${(run.recoveryMs / 1000).toFixed(1)} s after power-on; ${report.check.acknowledged} writes acknowledged, none lost`);
});
