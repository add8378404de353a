// Running host commands for the launcher (ip, dnsmasq, cp): one place that
// spawns, collects output and turns a failed exit into a LaunchCommandError
// that says what failed and why.

/** How much of a failed command's stderr goes into the error message. */
const STDERR_TAIL_CHARS = 2000;

export class LaunchCommandError extends Error {
  override name = "LaunchCommandError";
  constructor(
    message: string,
    readonly argv: readonly string[],
    readonly exitCode: number | null,
    readonly stderr: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export interface HostCommandResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

export interface HostCommandOptions {
  stdin?: Uint8Array;
  cwd?: string;
  /** Exit codes that count as success (default: only 0). */
  okExitCodes?: readonly number[];
}

/** Runs argv to completion; throws LaunchCommandError unless it exits with an ok code. */
export async function runHostCommand(argv: readonly string[], options: HostCommandOptions = {}): Promise<HostCommandResult> {
  let child;
  try {
    child = Bun.spawn([...argv], { cwd: options.cwd, stdin: options.stdin ?? "ignore", stdout: "pipe", stderr: "pipe" });
  } catch (cause) {
    throw new LaunchCommandError(`could not start ${argv[0]}: ${String(cause)}`, argv, null, "", { cause });
  }
  const [stdout, stderr, exitCode] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  if (!(options.okExitCodes ?? [0]).includes(exitCode)) {
    const tail = stderr.trim().slice(-STDERR_TAIL_CHARS);
    throw new LaunchCommandError(`${argv.join(" ")} exited with ${exitCode}${tail ? `: ${tail}` : ""}`, argv, exitCode, stderr);
  }
  return { exitCode, stdout, stderr };
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
