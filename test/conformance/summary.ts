// What a conformance run says, read from the JUnit report e2e.test writes
// (`--ginkgo.junit-report`): one line per test, and the plain summary a
// person reads first (out/conformance/summary.txt). Chunks of a full run
// combine into one summary.

import { attribute, failureOf, testCases } from "../support/junit.ts";

/** One test's outcome. */
export interface TestResult {
  name: string;
  /** interrupted: the run was stopped while it ran (Ctrl-C, a deadline): neither passed nor failed. */
  state: "passed" | "failed" | "skipped" | "interrupted";
  seconds: number;
  /** For a failure: its first lines. */
  failure?: string;
}

const FAILURE_LINES = 5;

/**
 * The test cases of a ginkgo JUnit report that the run selected. Ginkgo
 * also reports its suite's setup and teardown nodes
 * ([SynchronizedBeforeSuite], [ReportAfterSuite] and the like) and every
 * spec the focus left out; only the selected specs ("[It] ...") count.
 */
export function parseJunit(xml: string): TestResult[] {
  const results: TestResult[] = [];
  for (const { tag, body } of testCases(xml)) {
    const rawName = attribute(tag, "name") ?? "";
    if (!rawName.startsWith("[It] ")) continue;
    // Ginkgo appends the spec's labels ("[sig-node, NodeConformance,
    // Conformance]"); every spec of the suite has its SIG's label first.
    const name = rawName.slice("[It] ".length).replace(/ \[sig-[^\]]*\]$/, "");
    const status = attribute(tag, "status");
    // A spec the run's focus left out is reported too, as plainly "skipped".
    if (status === "skipped" && /<skipped message="skipped">/.test(body)) continue;
    const seconds = Number(attribute(tag, "time") ?? "0") || 0;
    const interrupted = status === "interrupted";
    const failed = !interrupted && (/<(failure|error)\b/.test(body) || status === "failed" || status === "panicked" || status === "timedout" || status === "aborted");
    const skipped = !failed && !interrupted && (/<skipped\b/.test(body) || status === "skipped" || status === "pending");
    const result: TestResult = { name, state: interrupted ? "interrupted" : failed ? "failed" : skipped ? "skipped" : "passed", seconds };
    if (failed) {
      const failure = failureOf(body);
      const text = failure?.text || attribute(failure?.tag ?? "", "message") || status || "failed";
      result.failure = text.split("\n").slice(0, FAILURE_LINES).join("\n");
    }
    results.push(result);
  }
  return results;
}

/** The plain summary: counts, time, rate, then each failure's name and first lines. */
export function summaryText(results: readonly TestResult[], context: { title: string; wallSeconds: number; missingImages?: readonly string[] }): string {
  const count = (state: TestResult["state"]) => results.filter((r) => r.state === state).length;
  const ran = count("passed") + count("failed");
  const lines = [
    context.title,
    `passed ${count("passed")}, failed ${count("failed")}, skipped ${count("skipped")}${count("interrupted") > 0 ? `, interrupted ${count("interrupted")}` : ""} (of ${results.length})`,
    `wall time ${(context.wallSeconds / 60).toFixed(1)} min; ${context.wallSeconds > 0 ? ((ran * 60) / context.wallSeconds).toFixed(2) : "0"} tests per minute`,
  ];
  if (context.missingImages && context.missingImages.length > 0) lines.push(`images not made here (${context.missingImages.length}): ${context.missingImages.join(", ")}`);
  for (const r of results.filter((x) => x.state === "failed")) {
    lines.push("", `FAILED ${r.name} (${r.seconds.toFixed(1)} s)`, ...(r.failure ?? "").split("\n").map((l) => `    ${l}`));
  }
  return `${lines.join("\n")}\n`;
}
