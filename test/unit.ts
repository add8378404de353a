// The README's unit step: `bun test` over the tree, with the console output
// as ever, and then, when anything failed, every failure again in full at
// the very end. Bun prints a failure's error inside its file's section and
// only the test's name in the closing list, so a CI log kept by its tail
// (`issues ci`) named a failing test without saying why (stop 66's flake
// of the four-process launch). The failures come from bun's own JUnit
// report (out/unit-junit.xml).
//
//   bun test/unit.ts [bun test's arguments]

import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { REPO_ROOT } from "../image/mod.ts";
import { attribute, failureOf, testCases } from "./support/junit.ts";

const REPORT = join(REPO_ROOT, "out", "unit-junit.xml");
/** The most lines of one failure printed again; the whole of it is in the report. */
const FAILURE_LINES = 40;

export interface UnitFailure {
  file: string;
  name: string;
  text: string;
}

/** The failed test cases of bun's JUnit report, each with its file, its name (describe blocks first) and its error. */
export function unitFailures(xml: string): UnitFailure[] {
  const failures: UnitFailure[] = [];
  const text = (tag: string, name: string) => attribute(tag, name) ?? "";
  for (const { tag, body } of testCases(xml)) {
    const failure = failureOf(body);
    if (!failure) continue;
    // bun names the describe blocks innermost first ("inner > outer").
    const describes = text(tag, "classname").split(" > ").filter(Boolean).reverse();
    failures.push({
      file: text(tag, "file"),
      name: [...describes, text(tag, "name")].join(" > "),
      text: (failure.text || text(failure.tag, "message")).trim(),
    });
  }
  return failures;
}

/** What the end of the log says of the failures. */
export function failuresAgain(failures: readonly UnitFailure[]): string {
  const lines = [`\n${failures.length} failed, again in full (all of it in ${REPORT.slice(REPO_ROOT.length + 1)}):`];
  for (const f of failures) {
    const text = f.text.split("\n");
    lines.push(`\n(fail) ${f.file}: ${f.name}`, ...text.slice(0, FAILURE_LINES).map((l) => `  ${l}`));
    if (text.length > FAILURE_LINES) lines.push(`  … ${text.length - FAILURE_LINES} more lines`);
  }
  return lines.join("\n");
}

if (import.meta.main) {
  mkdirSync(dirname(REPORT), { recursive: true });
  rmSync(REPORT, { force: true });
  const child = Bun.spawn([process.execPath, "test", ...process.argv.slice(2), "--reporter=junit", `--reporter-outfile=${REPORT}`], { cwd: REPO_ROOT, stdio: ["inherit", "inherit", "inherit"] });
  const code = await child.exited;
  if (code !== 0) {
    if (existsSync(REPORT)) {
      const failures = unitFailures(readFileSync(REPORT, "utf8"));
      if (failures.length > 0) console.error(failuresAgain(failures));
    } else console.error(`\nbun test wrote no report to ${REPORT}: it ended before its tests did (exit ${code})`);
  }
  process.exit(code);
}
