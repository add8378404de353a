// The e2e test harness: a few minutes of qemu per test do not fit bun's
// unit-test runner (one shared cluster, steps that depend on the previous
// one, figures to report), so e2e files register their tests here and
// run.ts runs them in order.
//
//   <name>.e2e.ts ── e2eTest("sentence", fn) ──▶ registry ──▶ run.ts: each test in
//                    e2eCleanup(fn)                            file order, then cleanups;
//                                                              "N passed, N failed"
//
// Files are named *.e2e.ts so that `bun test` (which runs *.test.ts) leaves
// them alone.

import type { Logger } from "../../internal/log/mod.ts";

/** What every test gets. */
export interface E2eContext {
  /** The image to boot (out/image unless run.ts was told otherwise). */
  imageDir: string;
  /** Echo node consoles to the terminal. */
  verbose: boolean;
  logger: Logger;
  /** Adds lines to the figures printed at the end of the run. */
  report(text: string): void;
}

export interface E2eTest {
  name: string;
  file: string;
  timeoutMs: number;
  /** Run only with run.ts --long: a step too long for CI's budget, run by hand (and said so where it is documented). */
  long: boolean;
  fn: (ctx: E2eContext) => Promise<void>;
}

/** The backstop for one test; its own waits have tighter deadlines. */
export const DEFAULT_TEST_TIMEOUT_MS = 15 * 60_000;

export const registry = {
  tests: [] as E2eTest[],
  cleanups: [] as { file: string; fn: () => Promise<void> }[],
  /** Set by run.ts while it imports a file, so registrations know their file. */
  loading: "",
};

/** Registers a test; its name reads as a sentence. Tests of a file run in the order registered. */
export function e2eTest(name: string, fn: (ctx: E2eContext) => Promise<void>, options: { timeoutMs?: number; long?: boolean } = {}): void {
  registry.tests.push({ name, file: registry.loading, timeoutMs: options.timeoutMs ?? DEFAULT_TEST_TIMEOUT_MS, long: options.long ?? false, fn });
}

/** Runs after the file's last test, pass or fail (tear down VMs here). */
export function e2eCleanup(fn: () => Promise<void>): void {
  registry.cleanups.push({ file: registry.loading, fn });
}

export class AssertionError extends Error {
  override name = "AssertionError";
}

export function assert(condition: unknown, message: string): asserts condition {
  if (!condition) throw new AssertionError(message);
}

export function assertEqual<T>(actual: T, expected: T, what: string): void {
  if (actual !== expected) throw new AssertionError(`${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`);
}
