// The one way the node runs child processes (etcd, the Kubernetes binaries):
// spawn, stream output into the runnable's logger line by line, stop with
// SIGTERM then SIGKILL on cancellation, and always wait for the exit.

import type { Subprocess } from "bun";
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
 * runProcess or runCommand, which keep it up to date.
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

/** A process that exited on its own: for a supervised service this is a death. */
export class ProcessExitError extends Error {
  override name = "ProcessExitError";
  constructor(
    readonly command: string,
    readonly exitCode: number | null,
    readonly signalCode: string | null,
  ) {
    super(
      signalCode
        ? `${command} was killed by ${signalCode}`
        : `${command} exited with code ${exitCode}`,
    );
  }
}

export class ProcessStartError extends Error {
  override name = "ProcessStartError";
}

async function pipeLines(
  stream: ReadableStream<Uint8Array>,
  logger: Logger,
  name: "stdout" | "stderr",
  parseLine?: (line: string) => ParsedLine | undefined,
): Promise<void> {
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
 * Runs a process as part of the calling runnable and returns once it is gone.
 * Returns normally when the runnable was cancelled; throws ProcessExitError
 * when the process exited on its own.
 */
export async function runProcess(ctx: RunContext, options: ProcessOptions): Promise<void> {
  const { command, args = [], killGraceMs = DEFAULT_KILL_GRACE_MS } = options;
  ctx.signal.throwIfAborted();
  let child: Subprocess<"ignore", "pipe", "pipe">;
  try {
    child = track(
      Bun.spawn([command, ...args], {
        cwd: options.cwd,
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
  ctx.logger.info("process started", { command, pid: child.pid });
  const output = Promise.all([
    pipeLines(child.stdout, ctx.logger, "stdout", options.parseLine),
    pipeLines(child.stderr, ctx.logger, "stderr", options.parseLine),
  ]).catch(() => {});

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
  env?: Record<string, string>;
  signal?: AbortSignal;
  /** Lines the command prints go here at debug level. */
  logger?: Logger;
}

/**
 * Runs a command to completion (mkfs, cryptsetup, ...) and returns its
 * output. Throws CommandError, with the command's stderr, if it fails; a
 * cancelled signal kills it.
 */
export async function runCommand(argv: readonly string[], options: CommandOptions = {}): Promise<{ stdout: string; stderr: string }> {
  options.signal?.throwIfAborted();
  const [command = ""] = argv;
  let child;
  try {
    child = track(
      Bun.spawn([...argv], {
        env: options.env ?? { PATH: "/usr/sbin:/usr/bin:/sbin:/bin" },
        stdin: options.stdin === undefined ? "ignore" : "pipe",
        stdout: "pipe",
        stderr: "pipe",
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
      new Response(child.stdout).text(),
      new Response(child.stderr).text(),
      child.exited,
    ]);
    for (const line of `${stdout}${stderr}`.split("\n")) if (line) options.logger?.debug(line, { command });
    options.signal?.throwIfAborted();
    if (exitCode !== 0) {
      const detail = stderr.trim() || stdout.trim() || "no output";
      throw new CommandError(`${argv.join(" ")} failed with exit code ${exitCode}: ${detail}`, exitCode, stdout, stderr);
    }
    return { stdout, stderr };
  } finally {
    options.signal?.removeEventListener("abort", onAbort);
  }
}
