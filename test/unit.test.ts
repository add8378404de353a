import { describe, expect, test } from "bun:test";
import { failuresAgain, unitFailures } from "./unit.ts";

// What bun 1.4.5 writes with --reporter=junit, cut down: one failure, one pass, one skip.
const REPORT = `<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="bun test" tests="3" failures="1">
  <testsuite name="test/launch/process_launcher.test.ts" file="test/launch/process_launcher.test.ts" tests="3">
    <testcase name="four processes: all UP" classname="node processes launched as a cluster" time="8.2" file="test/launch/process_launcher.test.ts" line="24">
      <failure type="Error" message="node1 cannot start: bind &quot;127.77.3.11:7835&quot;">Error: node1 cannot start: bind &quot;127.77.3.11:7835&quot;&#10;  last words: node1: listening&#10;      at launchProcessCluster (test/launch/process_launcher.ts:301:11)&#10;</failure>
    </testcase>
    <testcase name="addresses differ" classname="node processes launched as a cluster" time="0.0003" file="test/launch/process_launcher.test.ts" line="62" />
    <testcase name="nested" classname="inner &gt; outer" time="0.1" file="test/x.test.ts" line="80"><failure type="Error" message="m" /></testcase>
    <testcase name="a skipped one" classname="" time="0" file="test/launch/process_launcher.test.ts" line="70"><skipped /></testcase>
  </testsuite>
</testsuites>`;

describe("the unit step's failures at the end", () => {
  test("are read from bun's JUnit report with file, describe path and the whole error; passes and skips are not", () => {
    expect(unitFailures(REPORT)).toEqual([
      {
        file: "test/launch/process_launcher.test.ts",
        name: "node processes launched as a cluster > four processes: all UP",
        text: 'Error: node1 cannot start: bind "127.77.3.11:7835"\n  last words: node1: listening\n      at launchProcessCluster (test/launch/process_launcher.ts:301:11)',
      },
      // bun writes nested describe blocks innermost first; the message stands in for an empty body.
      { file: "test/x.test.ts", name: "outer > inner > nested", text: "m" },
    ]);
  });

  test("are printed one after another, each named and indented", () => {
    const text = failuresAgain(unitFailures(REPORT));
    expect(text).toContain("2 failed, again in full (all of it in out/unit-junit.xml):");
    expect(text).toContain(
      '(fail) test/launch/process_launcher.test.ts: node processes launched as a cluster > four processes: all UP\n  Error: node1 cannot start: bind "127.77.3.11:7835"\n    last words: node1: listening',
    );
  });
});
