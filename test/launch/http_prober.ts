// A user's client, for the e2e: it asks an HTTP address every PROBE_EVERY_MS
// from the cluster's network namespace (where a user's machine would be) and
// keeps every answer with its time, so that a step can say how many requests
// failed while it did something to the cluster, and whether a client that
// retries within a second would have noticed.
//
// One shell loop with the host's busybox nc, started once: no process per
// request in the e2e itself. Each line it prints is "<epoch seconds when the
// request began> <when it ended> <first line of the answer, or nothing>".
//
// A failure is absorbed when the client's next request, begun within
// RETRY_WITHIN_MS of the failure's end, is answered: what a client that
// retries within a second would have seen. A request that hangs (its
// server's VM stalled) is one failure, however long it hung; the longest
// gap between answers says how long the client went without one.

import type { Subprocess } from "bun";

/** How often the client asks. */
export const PROBE_EVERY_MS = 200;
/** A failed request counts as absorbed when one that succeeded follows within this. */
export const RETRY_WITHIN_MS = 1_000;

export interface ProbeOutcome {
  atMs: number;
  /** When its answer, or its failure, came. */
  endMs: number;
  ok: boolean;
  /** The answer's first line, or "no answer". */
  answer: string;
}

export interface ProbeSummary {
  total: number;
  failed: number;
  /** Failed requests whose next request, begun within RETRY_WITHIN_MS of their end, was not answered: what a retrying client would have noticed. */
  notAbsorbed: number;
  /** The longest time between two successful requests. */
  longestGapMs: number;
  /** Up to five failures, for the report. */
  examples: string[];
}

/** Sums up a run of probes (pure; exported for its test). */
export function summarize(outcomes: readonly ProbeOutcome[]): ProbeSummary {
  const failures = outcomes.filter((o) => !o.ok);
  const successes = outcomes.filter((o) => o.ok).map((o) => o.atMs);
  const notAbsorbed = failures.filter((f) => !successes.some((t) => t >= f.endMs && t - f.endMs <= RETRY_WITHIN_MS)).length;
  let longestGapMs = 0;
  for (let i = 1; i < successes.length; i++) longestGapMs = Math.max(longestGapMs, successes[i]! - successes[i - 1]!);
  return {
    total: outcomes.length,
    failed: failures.length,
    notAbsorbed,
    longestGapMs,
    examples: failures.slice(0, 5).map((f) => `${new Date(f.atMs).toISOString().slice(11, 23)} ${f.answer} after ${((f.endMs - f.atMs) / 1000).toFixed(1)} s`),
  };
}

/** Parses the loop's lines; a 2xx status line is a success. */
export function parseProbeLines(text: string): ProbeOutcome[] {
  const outcomes: ProbeOutcome[] = [];
  for (const line of text.split("\n")) {
    const m = /^(\d+(?:\.\d+)?) (\d+(?:\.\d+)?)\s?(.*)$/.exec(line.trim());
    if (!m) continue;
    const answer = m[3]!.trim();
    outcomes.push({ atMs: Math.round(Number(m[1]) * 1000), endMs: Math.round(Number(m[2]) * 1000), ok: /^HTTP\/1\.[01] 2\d\d/.test(answer), answer: answer || "no answer" });
  }
  return outcomes;
}

export class HttpProber {
  private constructor(
    private readonly process: Subprocess<"ignore", "pipe", "ignore">,
    private readonly output: Promise<string>,
  ) {}

  /** Starts asking http://host:port/ every PROBE_EVERY_MS; `inNamespace` wraps an argv to run in the cluster's network namespace. */
  static start(inNamespace: (argv: readonly string[]) => string[], host: string, port: number): HttpProber {
    const request = `printf 'GET / HTTP/1.0\\r\\nHost: ${host}\\r\\n\\r\\n' | busybox nc -w 1 ${host} ${port} 2>/dev/null | head -n 1 | tr -d '\\r'`;
    const loop = `while :; do t=$(date +%s.%N); a=$(${request}); echo "$t $(date +%s.%N) $a"; sleep ${PROBE_EVERY_MS / 1000}; done`;
    const process = Bun.spawn(inNamespace(["sh", "-c", loop]), { stdin: "ignore", stdout: "pipe", stderr: "ignore" });
    return new HttpProber(process, new Response(process.stdout).text());
  }

  /** Stops the client and sums up what it saw. */
  async stop(): Promise<ProbeSummary> {
    this.process.kill("SIGTERM");
    const text = await this.output;
    await this.process.exited;
    return summarize(parseProbeLines(text));
  }
}
