// Running host commands for the launcher (ip, dnsmasq, cp), through the
// project's one command runner (image/exec.ts's run: the supervisor's
// runCommand with this process's environment); this file adds only the
// synchronous form teardown needs.

import { run, type RunOptions, type RunResult } from "../../image/mod.ts";

export type HostCommandOptions = Pick<RunOptions, "stdin" | "cwd" | "okExitCodes" | "inherit">;
export type HostCommandResult = RunResult;

/** Runs argv to completion; throws CommandError unless it exits with an ok code. */
export function runHostCommand(argv: readonly string[], options: HostCommandOptions = {}): Promise<HostCommandResult> {
  return run(argv, options);
}

/** The synchronous form, for teardown on process exit (no event loop left). Never throws. */
export function runHostCommandSync(argv: readonly string[]): HostCommandResult {
  try {
    const result = Bun.spawnSync([...argv], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
    return { exitCode: result.exitCode ?? -1, stdout: result.stdout.toString(), stderr: result.stderr.toString() };
  } catch (err) {
    return { exitCode: -1, stdout: "", stderr: String(err) };
  }
}

/** Stops a long-running host process (dnsmasq, chronyd): SIGTERM, then SIGKILL after graceMs. */
export async function stopHostProcess(child: { kill(signal?: NodeJS.Signals | number): void; exited: Promise<number> }, graceMs: number): Promise<void> {
  child.kill("SIGTERM");
  const exited = await Promise.race([child.exited.then(() => true), Bun.sleep(graceMs).then(() => false)]);
  if (!exited) {
    child.kill("SIGKILL");
    await child.exited;
  }
}
