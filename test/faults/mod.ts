// The fault suite: a seeded, bounded run of faults against a live
// three-node cluster while owner clients write and read node labels, with
// checks that nothing acknowledged is lost and that reads never go back in
// time. `bun run faults` (cli.ts) is the long form; faults.test.ts is the
// short seeded run in CI.
//
//   mod.ts ── runFaults({mode}) ──▶ process_mode.ts  (node processes, tmpfs data)
//                                 └▶ qemu_mode.ts     (VMs in a network namespace)
//                         ▼
//             runner.ts (runs, recovery, per-run checks) ── workload.ts (owner clients)
//                         ▼
//             checker.ts (lost writes, duplicates, per-key linearizability) over history.ts

import { ProcessFaults } from "./process_mode.ts";
import { runFaultsOn, type FaultDriver, type FaultKind, type FaultMode, type FaultReport } from "./runner.ts";

export { PROCESS_FAULTS, QEMU_FAULTS, QEMU_RECOVERY_BOUND_MS, RECOVERY_BOUND_MS, checksOf, type FaultKind, type FaultMode, type FaultReport, type RunRecord } from "./runner.ts";

export interface FaultOptions {
  mode: FaultMode;
  seed: number;
  runs: number;
  kinds?: readonly FaultKind[];
  /** Process mode: the first loopback host number of the cluster (processes of other tests use others). */
  firstHost?: number;
  /** qemu mode: the image to boot. */
  imageDir?: string;
  log?: (line: string) => void;
}

/** Forms a cluster in the mode asked for, runs the faults, and stops the cluster. */
export async function runFaults(options: FaultOptions): Promise<FaultReport> {
  const log = options.log ?? (() => {});
  let driver: FaultDriver;
  if (options.mode === "process") {
    driver = await ProcessFaults.create(options.firstHost ?? 240, log);
  } else {
    const { QemuFaults } = await import("./qemu_mode.ts");
    driver = await QemuFaults.create({ imageDir: options.imageDir, log });
  }
  try {
    return await runFaultsOn(driver, { seed: options.seed, runs: options.runs, ...(options.kinds ? { kinds: options.kinds } : {}), log });
  } finally {
    await driver.stop();
  }
}
