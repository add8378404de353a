// Package testing: helpers shared by the tests of every package.
//
// Tests never sleep to wait for something: they poll a condition with
// eventually() until a deadline, and fail with the last reason if it never
// holds.

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const DEFAULT_EVENTUALLY_TIMEOUT_MS = 10_000;
export const DEFAULT_EVENTUALLY_INTERVAL_MS = 10;

/**
 * Polls `check` until it returns without throwing (and not `false`), and
 * returns its value. Throws the last failure once `timeoutMs` has passed.
 */
export async function eventually<T>(
  check: () => T | Promise<T>,
  options: { timeoutMs?: number; intervalMs?: number; what?: string } = {},
): Promise<Exclude<T, false>> {
  const deadline = performance.now() + (options.timeoutMs ?? DEFAULT_EVENTUALLY_TIMEOUT_MS);
  let lastError: unknown;
  for (;;) {
    try {
      const result = await check();
      if (result !== false) return result as Exclude<T, false>;
      lastError = new Error("condition returned false");
    } catch (err) {
      lastError = err;
    }
    if (performance.now() > deadline) {
      const reason = lastError instanceof Error ? lastError.message : String(lastError);
      throw new Error(`${options.what ?? "condition"} did not hold in time: ${reason}`, { cause: lastError });
    }
    await Bun.sleep(options.intervalMs ?? DEFAULT_EVENTUALLY_INTERVAL_MS);
  }
}

/** A fresh temporary directory, removed by the returned dispose function. */
export function tempDir(prefix = "nodecore-test-"): { path: string } & Disposable {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, [Symbol.dispose]: () => rmSync(path, { recursive: true, force: true }) };
}
