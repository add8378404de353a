// Running host commands for the build: one place that spawns, collects output
// and turns a failed exit into a CommandError that says what failed and why.

import { CommandError } from "./errors.ts";

/** How much of a failed command's stderr goes into the error message. */
const STDERR_TAIL_CHARS = 2000;

export interface RunOptions {
  cwd?: string;
  /** Added to the inherited environment. */
  env?: Record<string, string>;
  stdin?: Uint8Array;
  /** Write stdout to this file instead of collecting it. */
  stdoutFile?: string;
  /** Let the command write to our stdout/stderr (long installs show progress). */
  inherit?: boolean;
  /** Exit codes that count as success (default: only 0). */
  okExitCodes?: readonly number[];
}

export interface RunResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** Runs argv to completion; throws CommandError unless it exits with an ok code. */
export async function run(argv: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  let child;
  try {
    child = Bun.spawn([...argv], {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdin: options.stdin ?? "ignore",
      stdout: options.inherit ? "inherit" : options.stdoutFile ? Bun.file(options.stdoutFile) : "pipe",
      stderr: options.inherit ? "inherit" : "pipe",
    });
  } catch (cause) {
    throw new CommandError(`could not start ${argv[0]}: ${String(cause)}`, argv, null, "", { cause });
  }
  const [stdout, stderr, exitCode] = await Promise.all([
    child.stdout instanceof ReadableStream ? new Response(child.stdout).text() : "",
    child.stderr instanceof ReadableStream ? new Response(child.stderr).text() : "",
    child.exited,
  ]);
  if (!(options.okExitCodes ?? [0]).includes(exitCode)) {
    const tail = stderr.trim().slice(-STDERR_TAIL_CHARS);
    throw new CommandError(`${argv.join(" ")} exited with ${exitCode}${tail ? `: ${tail}` : ""}`, argv, exitCode, stderr);
  }
  return { stdout, stderr, exitCode };
}
