// bun run faults [--seed S] [--runs N] [--mode process]
// Runs the fault suite (runner.ts) and prints its table. The same seed
// replays the same faults in the same order with the same timing.

import { figure, percentile, seconds } from "../../bench/figures.ts";
import { FAULT_KINDS, runFaults, type RunRecord } from "./runner.ts";

function usage(problem: string): never {
  process.stderr.write(`faults: ${problem}\nusage: bun run faults [--seed S] [--runs N] [--mode process]\n`);
  process.exit(2);
}

function parse(argv: readonly string[]): { seed: number; runs: number } {
  let seed = Date.now() % 1_000_000;
  let runs: number = FAULT_KINDS.length;
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
        if (value === "qemu") usage("--mode qemu is not built yet (network partitions, netem and full disks need it); use --mode process");
        if (value !== "process") usage(`unknown mode '${value ?? ""}' (expected: process)`);
        break;
      default:
        usage(`unknown argument '${flag}'`);
    }
  }
  return { seed, runs };
}

const { seed, runs } = parse(process.argv.slice(2));
console.log(`fault suite, process mode: seed ${seed}, ${runs} runs (replay with --seed ${seed} --runs ${runs})`);
const report = await runFaults({ seed, runs, log: (line) => console.log(`  ${line}`) });
const span = (samples: (number | undefined)[]) => {
  const known = samples.filter((s): s is number => s !== undefined);
  const missing = samples.length - known.length;
  const text = known.length ? `${seconds(percentile(known, 50))} / ${seconds(Math.max(...known))}` : "-";
  return missing ? `${text} (${missing} never)` : text;
};
console.log("");
console.log(["fault".padEnd(10), "runs".padStart(4), "first good write p50 / max".padStart(30), "back to healthy p50 / max".padStart(30)].join("  "));
for (const kind of FAULT_KINDS) {
  const of: RunRecord[] = report.runs.filter((r) => r.kind === kind);
  if (of.length === 0) continue;
  console.log([kind.padEnd(10), String(of.length).padStart(4), span(of.map((r) => r.firstWriteMs)).padStart(30), span(of.map((r) => r.recoveryMs)).padStart(30)].join("  "));
}
console.log("");
figure("acknowledged writes", String(report.check.acknowledged), 40);
figure("acknowledged writes lost", String(report.check.lost), 40);
figure("linearizability violations (keys)", String(report.check.linearizabilityViolations), 40);
figure("operations answered twice differently", String(report.check.duplicates), 40);
figure("node processes that exited on their own", report.unexpectedExits.join(", ") || "none", 40);
for (const violation of report.check.violations) console.log(`VIOLATION ${violation.kind}: ${violation.message}`);
if (report.check.violations.length) {
  const file = `faults-seed-${seed}.json`;
  await Bun.write(file, JSON.stringify(report.history, null, 1));
  console.log(`history written to ${file}`);
}
const clean = report.check.violations.length === 0 && report.unexpectedExits.length === 0 && report.runs.every((r) => r.recoveryMs !== undefined);
process.exit(clean ? 0 : 1);
