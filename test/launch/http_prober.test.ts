import { describe, expect, test } from "bun:test";
import { parseProbeLines, summarize } from "./http_prober.ts";

describe("the e2e's HTTP client: what a user's client would have noticed", () => {
  test("answers are parsed from the loop's lines; a 2xx is a success, anything else or nothing a failure", () => {
    const outcomes = parseProbeLines("1700000000.100000000 HTTP/1.0 200 OK\n1700000000.300000000 \n1700000000.500 HTTP/1.0 503 Service Unavailable\ngarbage\n");
    expect(outcomes).toEqual([
      { atMs: 1700000000100, ok: true, answer: "HTTP/1.0 200 OK" },
      { atMs: 1700000000300, ok: false, answer: "no answer" },
      { atMs: 1700000000500, ok: false, answer: "HTTP/1.0 503 Service Unavailable" },
    ]);
  });

  test("a failure followed by a success within a second is absorbed; those that are not, and the longest gap, are counted", () => {
    const at = (s: number, ok: boolean) => ({ atMs: s * 1000, ok, answer: ok ? "HTTP/1.0 200 OK" : "no answer" });
    const summary = summarize([at(0, true), at(0.2, false), at(0.4, true), at(1, false), at(1.2, false), at(2.5, true), at(2.7, true)]);
    expect([summary.total, summary.failed, summary.notAbsorbed, summary.longestGapMs]).toEqual([7, 3, 2, 2100]);
    expect(summary.examples.length).toBe(3);
    expect(summarize([]).notAbsorbed).toBe(0);
  });
});
