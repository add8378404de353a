// Host commands for the build and the launcher run through the project's one
// command runner (internal/supervisor's runCommand), with this process's
// environment: host tools need HOME, GOPATH and the like, where a node's
// tools get PATH alone.

import { runCommand, type CommandOptions, type CommandResult } from "../internal/supervisor/mod.ts";

export type RunOptions = Pick<CommandOptions, "cwd" | "env" | "stdin" | "stdoutFile" | "inherit" | "okExitCodes">;
export type RunResult = CommandResult;

/** Runs argv to completion; throws CommandError unless it exits with an ok code (ProcessStartError if it cannot start). */
export function run(argv: readonly string[], options: RunOptions = {}): Promise<RunResult> {
  return runCommand(argv, { ...options, inheritEnv: true });
}
