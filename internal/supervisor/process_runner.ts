// The one way the node runs child processes (etcd, the Kubernetes binaries):
// spawn, stream output line by line into the runnable's `output` logger, stop with
// SIGTERM then SIGKILL on cancellation, and always wait for the exit.

import type { Subprocess } from "bun";
import { accessSync, constants, existsSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import type { Logger } from "../log/mod.ts";
import { sleep, type RunContext, type Runnable } from "./supervisor.ts";

/** How long a process gets between SIGTERM and SIGKILL. */
export const DEFAULT_KILL_GRACE_MS = 5_000;
/** Without a readiness check, a process that stays up this long counts as healthy. */
export const DEFAULT_HEALTHY_AFTER_MS = 1_000;

export interface ProcessOptions {
  command: string;
  args?: readonly string[];
  env?: Record<string, string>;
  cwd?: string;
  killGraceMs?: number;
  /**
   * Resolves once the process is ready to serve; then the runnable signals
   * healthy. Default: the process stayed up for DEFAULT_HEALTHY_AFTER_MS.
   */
  ready?: (signal: AbortSignal) => Promise<void>;
  /** Called with the pid once spawned (PID 1's reaper uses it to leave our children alone). */
  onSpawn?: (pid: number) => void;
  /**
   * Turns a line of the process's output into a structured entry (for
   * processes that log JSON, like etcd). Lines it returns undefined for are
   * logged as they are.
   */
  parseLine?: (line: string) => ParsedLine | undefined;
  /**
   * Where the running process's pid is kept. A process of the same command
   * still named there when this one starts is a leftover of an earlier run
   * of the node (killed before it could stop its children): it is killed
   * first, so that it cannot hold the ports and files this one needs.
   */
  pidFile?: string;
}

/** A line of child output as a log entry. */
export interface ParsedLine {
  level: "debug" | "info" | "warn" | "error";
  message: string;
  fields?: Record<string, unknown>;
}

/**
 * Pids of the processes bun spawned for us and still has to wait for. This
 * is process-wide state on purpose: the process table it mirrors is too.
 * PID 1's orphan reaper consults it so that it never steals the exit status
 * of a process bun is waiting for. Every spawn in the node goes through
 * runProcess, runCommand or spawnChild, which keep it up to date (a test
 * in process_runner.test.ts finds any other Bun.spawn in internal/).
 */
const spawned = new Set<number>();

/** Whether bun spawned `pid` for the node and will wait for it itself. */
export function isSpawnedChild(pid: number): boolean {
  return spawned.has(pid);
}

function track<T extends { pid: number; exited: Promise<unknown> }>(child: T): T {
  spawned.add(child.pid);
  child.exited.finally(() => spawned.delete(child.pid));
  return child;
}

/**
 * Starts a process that the caller manages itself (a throwaway server it
 * stops when done): tied to this process, and tracked so that PID 1's
 * reaper leaves its exit status to bun. Throws ProcessStartError naming
 * the command.
 */
export function spawnChild(argv: readonly string[], options: { env?: Record<string, string>; stdout?: "ignore" | "pipe" } = {}): Subprocess<"ignore", "ignore" | "pipe", "pipe"> {
  const [command = ""] = argv;
  try {
    return track(
      Bun.spawn(tiedToThisProcess(command, argv.slice(1), options.env?.PATH), {
        env: options.env ?? { PATH: DEFAULT_PATH },
        stdin: "ignore",
        stdout: options.stdout ?? "ignore",
        stderr: "pipe",
      }),
    );
  } catch (err) {
    throw new ProcessStartError(`could not start ${command}: ${(err as Error).message}`, { cause: err });
  }
}

/** A process that exited on its own: for a supervised service this is a death. */
export class ProcessExitError extends Error {
  override name = "ProcessExitError";
  constructor(
    readonly command: string,
    readonly exitCode: number | null,
    readonly signalCode: string | null,
  ) {
    super(signalCode ? `${command} was killed by ${signalCode}` : `${command} exited with code ${exitCode}`);
  }
}

/** The last name of the logger a child process's output goes to: `root.x.consensus.output`. */
export const PROCESS_OUTPUT_NAME = "output";

export class ProcessStartError extends Error {
  override name = "ProcessStartError";
}

async function pipeLines(stream: ReadableStream<Uint8Array>, logger: Logger, name: "stdout" | "stderr", parseLine?: (line: string) => ParsedLine | undefined): Promise<void> {
  const decoder = new TextDecoder();
  let buffered = "";
  const emit = (line: string) => {
    if (line.length === 0) return;
    const parsed = parseLine?.(line);
    if (parsed) logger[parsed.level](parsed.message, { ...parsed.fields, stream: name });
    else logger.info(line, { stream: name });
  };
  for await (const chunk of stream) {
    buffered += decoder.decode(chunk, { stream: true });
    let newline: number;
    while ((newline = buffered.indexOf("\n")) >= 0) {
      emit(buffered.slice(0, newline).replace(/\r$/, ""));
      buffered = buffered.slice(newline + 1);
    }
  }
  emit(buffered + decoder.decode());
}

/**
 * setpriv (util-linux), when the machine has it: children are started
 * through `setpriv --pdeathsig KILL`, so the kernel kills them when the
 * node process dies, however it dies (SIGKILL included). As PID 1 the node
 * never dies, so the image does without it; process-mode nodes use it.
 */
const SETPRIV = Bun.which("setpriv");

/**
 * The argv that starts `command` so that it dies with this process (see
 * SETPRIV). The command must exist: started through setpriv, a missing one
 * would be setpriv's exit code instead of an error that names it.
 */
export function tiedToThisProcess(command: string, args: readonly string[], path = DEFAULT_PATH): string[] {
  const found = command.includes("/") ? (isExecutable(command) ? command : undefined) : (Bun.which(command, { PATH: path }) ?? undefined);
  // The callers wrap this as "could not start <command>: …".
  if (!found) throw new ProcessStartError(`no such executable${command.includes("/") ? "" : ` on ${path}`}`);
  return SETPRIV ? [SETPRIV, "--pdeathsig", "KILL", "--", found, ...args] : [found, ...args];
}

/** PATH for one-shot tools that are not given an environment. */
const DEFAULT_PATH = "/usr/sbin:/usr/bin:/sbin:/bin";

function isExecutable(file: string): boolean {
  try {
    accessSync(file, constants.X_OK);
    return statSync(file).isFile();
  } catch {
    return false;
  }
}

/** How long a leftover process gets to disappear after SIGKILL. */
const LEFTOVER_GONE_MS = 10_000;

/** A process's start time (clock ticks since boot, /proc/<pid>/stat field 22), or undefined if it is gone or a zombie. */
function startTimeOf(pid: number): string | undefined {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
    // Fields after the command name, which is in parentheses and may hold spaces.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (fields[0] === "Z") return undefined; // Dead, not yet reaped: it holds nothing.
    return fields[19];
  } catch {
    return undefined;
  }
}

/** Records a running child in its pid file: its pid and start time (so that a reused pid is never mistaken for it). */
function writePidFile(pidFile: string, pid: number): void {
  writeFileSync(pidFile, `${pid} ${startTimeOf(pid) ?? "?"}\n`, { mode: 0o600 });
}

/**
 * Kills the process a pid file names, if that very process (same pid, same
 * start time) still runs; returns its pid if there was one.
 */
export async function killLeftover(pidFile: string, signal?: AbortSignal): Promise<number | undefined> {
  if (!existsSync(pidFile)) return undefined;
  const [pidText = "", started] = readFileSync(pidFile, "utf8").trim().split(" ");
  rmSync(pidFile, { force: true });
  const pid = Number(pidText);
  if (!Number.isInteger(pid) || pid <= 1 || spawned.has(pid) || pid === process.pid) return undefined;
  const runs = () => started !== undefined && startTimeOf(pid) === started;
  if (!runs()) return undefined;
  process.kill(pid, "SIGKILL");
  const deadline = Date.now() + LEFTOVER_GONE_MS;
  while (runs()) {
    if (Date.now() > deadline) throw new ProcessStartError(`a leftover process (pid ${pid}, from ${pidFile}) does not die`);
    await sleep(50, signal);
  }
  return pid;
}

/**
 * Runs a process as part of the calling runnable and returns once it is gone.
 * Returns normally when the runnable was cancelled; throws ProcessExitError
 * when the process exited on its own.
 */
export async function runProcess(ctx: RunContext, options: ProcessOptions): Promise<void> {
  const { command, args = [], killGraceMs = DEFAULT_KILL_GRACE_MS } = options;
  ctx.signal.throwIfAborted();
  if (options.pidFile) {
    const leftover = await killLeftover(options.pidFile, ctx.signal);
    if (leftover !== undefined) ctx.logger.warn("killed a leftover of an earlier run", { command, pid: leftover, pidFile: options.pidFile });
  }
  let child: Subprocess<"ignore", "pipe", "pipe">;
  try {
    child = track(
      Bun.spawn(tiedToThisProcess(command, args), {
        ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
        env: options.env ?? {},
        stdin: "ignore",
        stdout: "pipe",
        stderr: "pipe",
      }),
    );
  } catch (err) {
    throw new ProcessStartError(`could not start ${command}: ${(err as Error).message}`, { cause: err });
  }
  options.onSpawn?.(child.pid);
  if (options.pidFile) writePidFile(options.pidFile, child.pid);
  ctx.logger.info("process started", { command, pid: child.pid });
  // The process's own lines go to a logger of their own, `<path>.output`,
  // so that a chatty process cannot push the runnable's narrative out of
  // its log ring (internal/logtree).
  const outputLogger = ctx.logger.child(PROCESS_OUTPUT_NAME);
  const output = Promise.all([pipeLines(child.stdout, outputLogger, "stdout", options.parseLine), pipeLines(child.stderr, outputLogger, "stderr", options.parseLine)]).catch(() => {});

  let killTimer: ReturnType<typeof setTimeout> | undefined;
  const onAbort = () => {
    ctx.logger.info("stopping process", { pid: child.pid, signal: "SIGTERM" });
    child.kill("SIGTERM");
    killTimer = setTimeout(() => {
      ctx.logger.warn("process ignored SIGTERM, killing it", { pid: child.pid, graceMs: killGraceMs });
      child.kill("SIGKILL");
    }, killGraceMs);
  };
  ctx.signal.addEventListener("abort", onAbort, { once: true });

  // Readiness checks stop when the process exits or the runnable is cancelled.
  const readinessScope = new AbortController();
  const readinessSignal = AbortSignal.any([ctx.signal, readinessScope.signal]);
  const readiness = (options.ready ?? ((signal) => sleep(DEFAULT_HEALTHY_AFTER_MS, signal)))(readinessSignal);
  readiness.then(
    () => {
      if (child.exitCode === null && child.signalCode === null) ctx.signalHealthy();
    },
    () => {},
  );

  try {
    await child.exited;
    await output;
  } finally {
    readinessScope.abort();
    clearTimeout(killTimer);
    ctx.signal.removeEventListener("abort", onAbort);
    if (options.pidFile) rmSync(options.pidFile, { force: true });
  }
  if (ctx.signal.aborted) {
    ctx.logger.info("process stopped", { pid: child.pid, exitCode: child.exitCode, signal: child.signalCode });
    return;
  }
  throw new ProcessExitError(command, child.exitCode, child.signalCode === null ? null : String(child.signalCode));
}

/** A runnable that runs one process (see runProcess). */
export function processRunnable(options: ProcessOptions): Runnable {
  return (ctx) => runProcess(ctx, options);
}

/** A one-shot command that failed: names the command and carries its output. */
export class CommandError extends Error {
  override name = "CommandError";
  constructor(
    message: string,
    readonly argv: readonly string[],
    readonly exitCode: number | null,
    readonly stdout: string,
    readonly stderr: string,
  ) {
    super(message);
  }
}

export interface CommandOptions {
  /** Written to the command's standard input, then closed. */
  stdin?: Uint8Array | string;
  /**
   * The command's environment: by default PATH alone (a node's tools need
   * nothing else); with inheritEnv, added to this process's own.
   */
  env?: Record<string, string>;
  /** Start from this process's environment: host tools (the image build, the launcher) need HOME, GOPATH and the like. */
  inheritEnv?: boolean;
  cwd?: string;
  signal?: AbortSignal | undefined;
  /** Lines the command prints go here at debug level. */
  logger?: Logger;
  /** Write stdout to this file instead of collecting it. */
  stdoutFile?: string;
  /** Let the command write to this process's stdout and stderr (long installs show progress); nothing is collected. */
  inherit?: boolean;
  /** Exit codes that count as success (default: only 0). */
  okExitCodes?: readonly number[];
}

export interface CommandResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

/** How much of a failed command's output goes into the error message. */
const OUTPUT_TAIL_CHARS = 2000;

/**
 * Runs a command to completion (mkfs, cryptsetup, the image build's tools,
 * ...) and returns its output: the project's one way to do so. Throws
 * ProcessStartError if it cannot start, CommandError with the command's
 * output if it exits with a code not counted as success; a cancelled
 * signal kills it.
 */
export async function runCommand(argv: readonly string[], options: CommandOptions = {}): Promise<CommandResult> {
  options.signal?.throwIfAborted();
  const [command = ""] = argv;
  const env: Record<string, string> = options.inheritEnv ? { ...(process.env as Record<string, string>), ...options.env } : (options.env ?? { PATH: DEFAULT_PATH });
  let child;
  try {
    child = track(
      Bun.spawn(tiedToThisProcess(command, argv.slice(1), env.PATH ?? DEFAULT_PATH), {
        ...(options.cwd !== undefined ? { cwd: options.cwd } : {}),
        env,
        stdin: options.stdin === undefined ? "ignore" : "pipe",
        stdout: options.inherit ? "inherit" : options.stdoutFile ? Bun.file(options.stdoutFile) : "pipe",
        stderr: options.inherit ? "inherit" : "pipe",
      }),
    );
  } catch (err) {
    throw new ProcessStartError(`could not start ${command}: ${(err as Error).message}`, { cause: err });
  }
  if (options.stdin !== undefined && child.stdin) {
    child.stdin.write(options.stdin);
    await child.stdin.end();
  }
  const onAbort = () => child.kill("SIGKILL");
  options.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    const [stdout, stderr, exitCode] = await Promise.all([
      child.stdout instanceof ReadableStream ? new Response(child.stdout).text() : "",
      child.stderr instanceof ReadableStream ? new Response(child.stderr).text() : "",
      child.exited,
    ]);
    for (const line of `${stdout}${stderr}`.split("\n")) if (line) options.logger?.debug(line, { command });
    options.signal?.throwIfAborted();
    if (!(options.okExitCodes ?? [0]).includes(exitCode)) {
      const detail = (stderr.trim() || stdout.trim() || "no output").slice(-OUTPUT_TAIL_CHARS);
      throw new CommandError(`${argv.join(" ")} failed with exit code ${exitCode}: ${detail}`, argv, exitCode, stdout, stderr);
    }
    return { stdout, stderr, exitCode };
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
  }
}
