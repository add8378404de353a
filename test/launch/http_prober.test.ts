import { describe, expect, test } from "bun:test";
import { parseProbeLines, summarize } from "./http_prober.ts";

describe("the e2e's HTTP client: what a user's client would have noticed", () => {
  test("answers are parsed from the loop's lines; a 2xx is a success, anything else or nothing a failure", () => {
    const outcomes = parseProbeLines(
      "1700000000.100000000 1700000000.150000000 HTTP/1.0 200 OK\n1700000000.300000000 1700000001.300000000 \n1700000000.500 1700000000.6 HTTP/1.0 503 Service Unavailable\ngarbage\n1700000000.7 no end\n",
    );
    expect(outcomes).toEqual([
      { atMs: 1700000000100, endMs: 1700000000150, ok: true, answer: "HTTP/1.0 200 OK" },
      { atMs: 1700000000300, endMs: 1700000001300, ok: false, answer: "no answer" },
      { atMs: 1700000000500, endMs: 1700000000600, ok: false, answer: "HTTP/1.0 503 Service Unavailable" },
    ]);
  });

  test("a failure whose next request, begun within a second of its end, is answered is absorbed, however long it hung; those that are not, and the longest gap, are counted", () => {
    const at = (s: number, ok: boolean, took = 0.05) => ({ atMs: s * 1000, endMs: (s + took) * 1000, ok, answer: ok ? "HTTP/1.0 200 OK" : "no answer" });
    const summary = summarize([at(0, true), at(0.2, false), at(0.4, true), at(1, false), at(1.2, false), at(2.5, true), at(2.7, true)]);
    expect([summary.total, summary.failed, summary.notAbsorbed, summary.longestGapMs]).toEqual([7, 3, 2, 2100]);
    expect(summary.examples).toEqual(["00:00:00.200 no answer after 0.1 s", "00:00:01.000 no answer after 0.1 s", "00:00:01.200 no answer after 0.1 s"]);
    // A request that hung for 4 s while its server stalled, then the next one answered: one failure, absorbed; the gap says how long.
    const hung = summarize([at(0, true), at(0.2, false, 4), at(4.4, true)]);
    expect([hung.failed, hung.notAbsorbed, hung.longestGapMs]).toEqual([1, 0, 4400]);
    expect(summarize([]).notAbsorbed).toBe(0);
  });
});
