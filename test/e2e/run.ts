// `bun run e2e`: builds what changed, then runs every test/e2e/*.e2e.ts test
// in order (they boot qemu VMs; see harness.ts) and ends with the line
// "N passed, N failed". Exits non-zero if any test failed or none ran.
//
//   bun test/e2e/run.ts [--verbose] [--no-build] [--image-dir dir] [--long] [--stop-after text] [file filter]
//
// --long also runs the steps registered as long (harness.ts): each says in
// its file why it is too long for CI's budget; without it they are listed
// as skipped.
// --verbose echoes the node consoles; they are always in
// out/cluster/e2e/<node>.console.log. --stop-after ends the run after the
// first step whose name contains the text (cleanups still run): for working
// on one step without the ones after it. CI never passes it.

import { readdirSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { availableParallelism } from "node:os";
import { chooseAccelerator, manifestPaths, OUT_DIR, readManifest, REPO_ROOT } from "../../image/mod.ts";
import { createLogger } from "../../internal/log/mod.ts";
import { ensureBuilt } from "../launch/mod.ts";
import { registry, type E2eContext } from "./harness.ts";
import { consoleTails } from "./console_tails.ts";

const { values, positionals } = parseArgs({
  options: {
    verbose: { type: "boolean", default: false },
    "no-build": { type: "boolean", default: false },
    "image-dir": { type: "string" },
    "stop-after": { type: "string" },
    long: { type: "boolean", default: false },
  },
  allowPositionals: true,
  strict: true,
});

const logger = createLogger("e2e");
const figures: string[] = [];
const context: E2eContext = {
  imageDir: values["image-dir"] ?? join(REPO_ROOT, OUT_DIR),
  verbose: values.verbose,
  logger,
  // Logged as it comes too, so that a run stopped or killed part-way keeps what it measured.
  report: (text) => {
    figures.push(text);
    logger.info(`figure: ${text}`);
  },
};

class TestTimeoutError extends Error {
  override name = "TestTimeoutError";
}

async function withDeadline(promise: Promise<void>, ms: number, what: string): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([promise, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new TestTimeoutError(`${what} did not finish within ${ms / 1000} s`)), ms)))]);
  } finally {
    clearTimeout(timer);
  }
}

const seconds = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

if (!values["no-build"]) await ensureBuilt(logger);
// Every figure depends on it: the clusters' launches take this decision
// from the same cache (image/accel.ts), so it is made once, here.
const accel = await chooseAccelerator({ kernel: manifestPaths(readManifest(context.imageDir), context.imageDir).kernel });
logger.info(`qemu runs the nodes with ${accel.accel.toUpperCase()}: ${accel.reason}`);

const files = readdirSync(import.meta.dir)
  .filter((f) => f.endsWith(".e2e.ts") && positionals.every((p) => f.includes(p)))
  .sort();
for (const file of files) {
  registry.loading = file;
  await import(join(import.meta.dir, file));
}

let passed = 0;
let failed = 0;
let stopped = false;
let skipped = 0;
/** Each failed step's name and first line, repeated at the end: a CI log is often read from its tail. */
const failures: string[] = [];
for (const file of new Set(registry.tests.map((t) => t.file))) {
  for (const test of registry.tests.filter((t) => t.file === file)) {
    if (stopped) break;
    if (test.long && !values.long) {
      skipped++;
      process.stdout.write(`- ${test.name} (long: run with --long)\n`);
      continue;
    }
    logger.info(`running: ${test.name}`);
    const started = performance.now();
    try {
      await withDeadline(test.fn(context), test.timeoutMs, test.name);
      passed++;
      process.stdout.write(`✓ ${test.name} (${seconds(performance.now() - started)})\n`);
      if (values["stop-after"] !== undefined && test.name.includes(values["stop-after"])) {
        stopped = true;
        process.stdout.write(`  (--stop-after: the steps after this one are not run)\n`);
      }
    } catch (err) {
      failed++;
      failures.push(
        [
          `✗ ${test.name}`,
          // The whole message on one line: a message that quotes a command's
          // multi-line output (ctl's JSON) kept only its first line, "({".
          `  ${String((err as Error).message ?? err)
            .replace(/\s*\n\s*/g, " ")
            .slice(0, 2000)}`,
          ...consoleTails(Date.now() - (performance.now() - started)),
        ].join("\n"),
      );
      process.stdout.write(`✗ ${test.name} (${seconds(performance.now() - started)})\n  ${String((err as Error).stack ?? err).replaceAll("\n", "\n  ")}\n`);
    }
  }
  for (const cleanup of registry.cleanups.filter((c) => c.file === file)) {
    await cleanup.fn().catch((err) => logger.error("cleanup failed", { file, error: (err as Error).message }));
  }
}

if (figures.length) process.stdout.write(`\nfigures (qemu with ${accel.accel.toUpperCase()}, ${accel.reason}; this host: ${availableParallelism()} cores):\n${figures.join("\n")}\n`);
if (failures.length) process.stdout.write(`\nfailed:\n${failures.join("\n")}\n`);
process.stdout.write(`\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} long steps skipped (--long runs them)` : ""}\n`);
process.exit(failed > 0 || passed === 0 ? 1 : 0);
