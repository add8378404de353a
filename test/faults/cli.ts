// bun run faults [--seed S] [--runs N] [--mode process|qemu] [--kinds a,b]
// Runs the fault suite (mod.ts) and prints its table. The same seed
// replays the same faults in the same order with the same timing.
// The disasters, quorum-loss (quorum_loss.ts) and restore (restore_run.ts),
// end the cluster they run on: asked for, each runs once, on a cluster of
// its own, after the others.

import { figure, percentile, seconds } from "../../bench/figures.ts";
import { checksOf, PROCESS_FAULTS, QEMU_FAULTS, runFaults, type FaultKind, type FaultMode, type RunRecord } from "./mod.ts";
import { runQuorumLoss } from "./quorum_loss.ts";
import { runRestore } from "./restore_run.ts";

/** Faults after which the cluster is not the one it was: each runs once, on a cluster of its own (process mode). */
const DISASTERS = ["quorum-loss", "restore"] as const;
type Disaster = (typeof DISASTERS)[number];

const USAGE = "usage: bun run faults [--seed S] [--runs N] [--mode process|qemu] [--kinds kind,kind]";

function usage(problem: string): never {
  process.stderr.write(`faults: ${problem}\n${USAGE}\n  process faults: ${[...PROCESS_FAULTS, ...DISASTERS].join(", ")}\n  qemu faults: ${QEMU_FAULTS.join(", ")}\n`);
  process.exit(2);
}

function parse(argv: readonly string[]): { seed: number; runs: number | undefined; mode: FaultMode; kinds: FaultKind[] | undefined; disasters: Disaster[] } {
  let seed = Date.now() % 1_000_000;
  let runs: number | undefined;
  let mode: FaultMode = "process";
  let kinds: FaultKind[] | undefined;
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i]!;
    const value = argv[i + 1];
    const integer = (name: string) => {
      if (value === undefined || !/^\d+$/.test(value)) usage(`${name} needs a whole number, got ${value === undefined ? "nothing" : `'${value}'`}`);
      i++;
      return Number(value);
    };
    switch (flag) {
      case "--seed":
        seed = integer("--seed");
        break;
      case "--runs":
        runs = integer("--runs");
        if (runs < 1) usage("--runs must be at least 1");
        break;
      case "--mode":
        i++;
        if (value !== "process" && value !== "qemu") usage(`unknown mode '${value ?? ""}' (expected: process or qemu)`);
        mode = value;
        break;
      case "--kinds":
        i++;
        kinds = (value ?? "").split(",").filter(Boolean) as FaultKind[];
        if (kinds.length === 0) usage("--kinds needs a comma-separated list of fault kinds");
        break;
      default:
        usage(`unknown argument '${flag}'`);
    }
  }
  const known: readonly string[] = mode === "process" ? [...PROCESS_FAULTS, ...DISASTERS] : QEMU_FAULTS;
  for (const kind of kinds ?? []) if (!known.includes(kind)) usage(`fault '${kind}' is not a ${mode}-mode fault (${known.join(", ")})`);
  const isDisaster = (k: string): k is Disaster => (DISASTERS as readonly string[]).includes(k);
  const disasters = mode !== "process" ? [] : kinds === undefined ? [...DISASTERS] : (kinds as string[]).filter(isDisaster);
  const ordinary = kinds?.filter((k) => !isDisaster(k));
  return { seed, runs, mode, kinds: ordinary, disasters };
}

const options = parse(process.argv.slice(2));
const kinds = options.kinds ?? (options.mode === "process" ? [...PROCESS_FAULTS] : [...QEMU_FAULTS]);
const runs = kinds.length === 0 ? 0 : (options.runs ?? kinds.length);
const listed = [...kinds, ...options.disasters];
const replay = `--mode ${options.mode} --seed ${options.seed} --runs ${runs}${options.kinds ? ` --kinds ${listed.join(",")}` : ""}`;
console.log(
  `fault suite, ${options.mode} mode: seed ${options.seed}, ${runs} runs of ${kinds.join(", ") || "nothing"}${options.disasters.length ? `, then ${options.disasters.join(", ")} once each` : ""} (replay with ${replay})`,
);
const began = performance.now();
/** Forming the cluster failed, or it broke beyond what the runner reads: one line, no stack. */
const fatal = (err: unknown): never => {
  process.stderr.write(`faults: ${(err as Error).message}\n`);
  process.exit(1);
};
const report =
  runs > 0
    ? await runFaults({ mode: options.mode, seed: options.seed, runs, kinds, log: (line) => console.log(`  ${line}`) }).catch(fatal)
    : {
        seed: options.seed,
        mode: options.mode,
        runs: [],
        check: { acknowledged: 0, undecided: [], lost: 0, linearizabilityViolations: 0, duplicates: 0, violations: [] },
        unexpectedExits: [],
        history: { ops: [], final: {} },
      };
/** Each disaster's row of the table, and what went wrong that the history cannot show. */
const disasterRows: string[][] = [];
const disasterProblems: string[] = [];
for (const kind of options.disasters) {
  console.log(`  ${kind}: a cluster of its own`);
  const log = (line: string) => console.log(`  ${kind}: ${line}`);
  if (kind === "quorum-loss") {
    const d = await runQuorumLoss({ seed: options.seed, firstHost: 70, log }).catch(fatal);
    report.check.violations.push(...d.check.violations);
    report.check.undecided.push(...d.check.undecided);
    report.unexpectedExits.push(...d.unexpectedExits);
    disasterRows.push([
      kind,
      "1",
      String(d.check.acknowledged),
      String(d.check.lost),
      String(d.check.linearizabilityViolations + d.check.duplicates),
      d.firstWriteMs === undefined ? "- (never)" : seconds(d.firstWriteMs),
      `recover ${seconds(d.recoverMs)}`,
    ]);
    if (!d.refusedWithQuorum.includes("still has a quorum")) disasterProblems.push(`quorum-loss: recover was not refused while the quorum answered (${d.refusedWithQuorum || "it went ahead"})`);
    if (d.etcdMembers.join() !== d.survivor) disasterProblems.push(`quorum-loss: etcd lists ${d.etcdMembers.join(", ")} after the recovery, not only ${d.survivor}`);
    if (d.consensusRecords.join() !== d.survivor) disasterProblems.push(`quorum-loss: the records give the consensus role to ${d.consensusRecords.join(", ")}, not only ${d.survivor}`);
    if (d.firstWriteMs === undefined) disasterProblems.push("quorum-loss: no write was acknowledged after the loss");
  } else {
    const d = await runRestore({ seed: options.seed, firstHost: 90, log }).catch(fatal);
    report.check.violations.push(...d.check.violations);
    report.check.undecided.push(...d.check.undecided);
    report.unexpectedExits.push(...d.unexpectedExits);
    disasterRows.push([kind, "1", String(d.check.acknowledged), String(d.check.lost), String(d.check.linearizabilityViolations + d.check.duplicates), "-", `restore ${seconds(d.restoreMs)}`]);
    if (!d.refusedDamaged) disasterProblems.push("restore: a damaged copy of the backup was not refused");
    if (d.ackedBeforeBackup === 0) disasterProblems.push("restore: no write was acknowledged before the backup, so nothing was checked");
    const missing = d.expectedBack.filter((id) => !d.rejoined.includes(id));
    if (missing.length) disasterProblems.push(`restore: ${missing.join(", ")} did not come back with their own disks`);
    if (d.etcdMembers.join() !== d.restoredId) disasterProblems.push(`restore: etcd lists ${d.etcdMembers.join(", ")}, not only the restored node ${d.restoredId}`);
  }
}
const span = (samples: (number | undefined)[]) => {
  const known = samples.filter((s): s is number => s !== undefined);
  const missing = samples.length - known.length;
  const text = known.length ? `${seconds(percentile(known, 50))} / ${seconds(Math.max(...known))}` : "-";
  return missing ? `${text} (${missing} never)` : text;
};
const columns: [string, number][] = [
  ["fault", 12],
  ["runs", 4],
  ["acked", 6],
  ["lost", 4],
  ["viol.", 5],
  ["first good write p50 / max", 28],
  ["back to healthy p50 / max", 28],
];
const row = (cells: string[]) => cells.map((c, i) => (i === 0 ? c.padEnd(columns[i]![1]) : c.padStart(columns[i]![1]))).join("  ");
console.log("");
console.log(row(columns.map(([name]) => name)));
for (const kind of new Set(kinds)) {
  const of: RunRecord[] = report.runs.filter((r) => r.kind === kind);
  if (of.length === 0) continue;
  const check = checksOf(report, kind);
  console.log(
    row([
      kind,
      String(of.length),
      String(check.acknowledged),
      String(check.lost),
      String(check.linearizabilityViolations + check.duplicates),
      span(of.map((r) => r.firstWriteMs)),
      span(of.map((r) => r.recoveryMs)),
    ]),
  );
}
for (const cells of disasterRows) console.log(row(cells));
console.log("");
console.log("acked: writes acknowledged; lost: acknowledged writes missing from a member's copy at the end of their run;");
console.log("viol.: keys whose history is not linearizable, plus operations answered twice differently");
const notes = report.runs.flatMap((r) => r.notes.map((n) => `${r.kind} on ${r.victim}: ${n}`));
if (notes.length) {
  console.log("");
  for (const note of [...new Set(notes)]) console.log(`  ${note}`);
}
console.log("");
figure("node processes / VMs that exited on their own", report.unexpectedExits.join(", ") || "none", 48);
figure("wall time", seconds(performance.now() - began), 48);
for (const violation of report.check.violations) console.log(`VIOLATION ${violation.kind}: ${violation.message}`);
for (const key of report.check.undecided) console.log(`UNDECIDED (neither proven nor refuted): ${key}`);
if (report.check.violations.length) {
  const file = `faults-seed-${options.seed}.json`;
  await Bun.write(file, JSON.stringify(report.history, null, 1));
  console.log(`history of the runs with a violation written to ${file}`);
}
const problems = report.runs.flatMap((r) => r.problems);
problems.push(...disasterProblems);
for (const problem of problems) console.log(`PROBLEM: ${problem}`);
const clean = problems.length === 0 && report.check.violations.length === 0 && report.unexpectedExits.length === 0 && report.runs.every((r) => r.recoveryMs !== undefined);
process.exit(clean ? 0 : 1);
