// Which tests a conformance run runs, and in which e2e.test process:
//
//   the mode's names (quick: quick.ts; full: every [Conformance] test the
//   suite lists) ──--focus, --skip──▶ selected ──--resume: less those a
//   report of this run's directory already settled──▶ to run
//        │
//        ├─▶ lanes: the tests not marked [Serial], dealt round-robin into
//        │   --parallel lanes, one e2e.test process each, all at once
//        └─▶ then the [Serial] tests, in one process, alone
//
// Each process writes its own JUnit report (junit-<run>-<lane>.xml), so a
// run cut off part way keeps what finished, and the summary reads every
// report in the directory, the latest result of a test winning.

import type { TestResult } from "./summary.ts";

export interface Selection {
  focus?: RegExp;
  skip?: RegExp;
  /** Tests an earlier report settled (passed, failed or skipped): --resume leaves them out. */
  done?: ReadonlySet<string>;
}

/** The names to run, in the order given. */
export function selectTests(names: readonly string[], selection: Selection): string[] {
  return names.filter((name) => (selection.focus === undefined || selection.focus.test(name)) && (selection.skip === undefined || !selection.skip.test(name)) && !selection.done?.has(name));
}

/** A test that must run with nothing else beside it (the suite marks it so). */
export function isSerial(name: string): boolean {
  return /\[Serial\]/.test(name);
}

export interface Lanes {
  /** One list per e2e.test process that runs at once; none empty. */
  parallel: string[][];
  /** Run after them, in one process. */
  serial: string[];
}

/** The tests dealt into `count` lanes (round-robin, so each lane gets a like mix), the [Serial] ones apart. */
export function lanes(names: readonly string[], count: number): Lanes {
  if (!Number.isInteger(count) || count < 1) throw new RangeError(`lanes: ${count}, not a whole number of at least 1`);
  const parallel: string[][] = Array.from({ length: count }, () => []);
  const free = names.filter((n) => !isSerial(n));
  free.forEach((name, i) => parallel[i % count]!.push(name));
  return { parallel: parallel.filter((lane) => lane.length > 0), serial: names.filter(isSerial) };
}

/**
 * The results of several reports, read in order: a test reported again
 * takes its later result, in the place where it first appeared.
 */
export function mergeResults(reports: readonly (readonly TestResult[])[]): TestResult[] {
  const merged = new Map<string, TestResult>();
  for (const report of reports) for (const result of report) merged.set(result.name, result);
  return [...merged.values()];
}

/** The tests a report settled: an interrupted one is run again by --resume. */
export function settled(results: readonly TestResult[]): Set<string> {
  return new Set(results.filter((r) => r.state !== "interrupted").map((r) => r.name));
}

/** A report's file name in the run's directory: the run's stamp sorts the reports in the order they were written. */
export function reportName(runStamp: string, lane: string): string {
  return `junit-${runStamp}-${lane}.xml`;
}

/** The reports of a run's directory, oldest first (the names sort so). */
export function reportFiles(files: readonly string[]): string[] {
  return files.filter((f) => /^junit-\d{8}T\d{6}Z-[\w-]+\.xml$/.test(f)).sort();
}

/** A run's stamp: its start in UTC, to the second (20261202T021500Z). */
export function runStamp(date: Date): string {
  return date
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d+Z$/, "Z");
}
