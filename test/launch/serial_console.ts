// A node's serial console as the launcher sees it: qemu's stdout, split into
// lines, each stamped with the host time it arrived (the guest's own clocks —
// the kernel's uptime, the logger's wall time — are not comparable with the
// host's), appended to <node>.console.log, optionally echoed to the terminal
// as "[node1] ...", and searchable by waiters.

import { appendFileSync } from "node:fs";

/** While a wait lasts, report progress this often. */
export const WAIT_PROGRESS_INTERVAL_MS = 15_000;
/** Lines of console quoted in a timeout error. */
const TAIL_LINES_IN_ERRORS = 15;

export interface ConsoleLine {
  /** Milliseconds since this boot's qemu process was started. */
  ms: number;
  /** Host time the line arrived. */
  at: Date;
  text: string;
}

export class ConsoleWaitError extends Error {
  override name = "ConsoleWaitError";
}

export interface WaitOptions {
  timeoutMs: number;
  /** What the wait is for, as errors say it: "node2 to be UP" (default: the pattern). */
  awaited?: string;
  /** Called every WAIT_PROGRESS_INTERVAL_MS while waiting. */
  onProgress?: (elapsedMs: number, lastLine: ConsoleLine | undefined) => void;
}

interface Waiter {
  pattern: RegExp;
  awaited: string;
  resolve: (line: ConsoleLine) => void;
  reject: (err: Error) => void;
}

/** One boot's console: a new one per qemu process. */
export class SerialConsole {
  readonly lines: ConsoleLine[] = [];
  private readonly waiters = new Set<Waiter>();
  private ended: string | undefined;
  private readonly started = performance.now();

  constructor(
    readonly nodeName: string,
    private readonly logFile: string,
    private readonly echo: boolean,
  ) {}

  /** Reads a stream (qemu's stdout) to its end, line by line. */
  async pump(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let pending = "";
    for await (const chunk of stream) {
      pending += decoder.decode(chunk, { stream: true });
      let newline: number;
      while ((newline = pending.indexOf("\n")) >= 0) {
        this.take(pending.slice(0, newline));
        pending = pending.slice(newline + 1);
      }
    }
    if (pending !== "") this.take(pending);
  }

  /** A line from the launcher itself (boot markers), into the log file only. */
  note(text: string): void {
    appendFileSync(this.logFile, `=== launcher: ${text} ===\n`);
  }

  private take(raw: string): void {
    const text = raw.replace(/\r/g, "");
    const line: ConsoleLine = { ms: performance.now() - this.started, at: new Date(), text };
    this.lines.push(line);
    try {
      appendFileSync(this.logFile, text + "\n");
    } catch {
      // The log is a convenience; waiters still see the line.
    }
    if (this.echo) process.stdout.write(`[${this.nodeName}] ${text}\n`);
    for (const waiter of this.waiters) {
      if (waiter.pattern.test(text)) {
        this.waiters.delete(waiter);
        waiter.resolve(line);
      }
    }
  }

  /** Says that no more lines will come (qemu exited): pending waits fail with why. */
  end(why: string): void {
    this.ended = why;
    for (const waiter of this.waiters) waiter.reject(this.endedError(why, waiter.awaited));
    this.waiters.clear();
  }

  /** The first line of this boot that matches, if any yet. */
  find(pattern: RegExp): ConsoleLine | undefined {
    return this.lines.find((l) => pattern.test(l.text));
  }

  /**
   * The first line of this boot matching pattern (already seen or yet to
   * come). Throws ConsoleWaitError on timeout or when the console ends.
   */
  async waitFor(pattern: RegExp, options: WaitOptions): Promise<ConsoleLine> {
    const seen = this.find(pattern);
    if (seen) return seen;
    const awaited = options.awaited ?? `/${pattern.source}/ on ${this.nodeName}'s console`;
    if (this.ended !== undefined) throw this.endedError(this.ended, awaited);
    const started = performance.now();
    let waiter: Waiter | undefined;
    let timeout: ReturnType<typeof setTimeout> | undefined;
    let progress: ReturnType<typeof setInterval> | undefined;
    try {
      return await new Promise<ConsoleLine>((resolve, reject) => {
        waiter = { pattern, awaited, resolve, reject };
        this.waiters.add(waiter);
        timeout = setTimeout(() => {
          reject(new ConsoleWaitError(`waited ${Math.round(options.timeoutMs / 1000)} s for ${awaited}${this.tail()}`));
        }, options.timeoutMs);
        if (options.onProgress) {
          const report = options.onProgress;
          progress = setInterval(() => report(performance.now() - started, this.lines.at(-1)), WAIT_PROGRESS_INTERVAL_MS);
        }
      });
    } finally {
      if (waiter) this.waiters.delete(waiter);
      clearTimeout(timeout);
      clearInterval(progress);
    }
  }

  private endedError(why: string, awaited: string): ConsoleWaitError {
    return new ConsoleWaitError(`${this.nodeName}: ${why} while waiting for ${awaited}${this.tail()}`);
  }

  private tail(): string {
    const tail = this.lines.slice(-TAIL_LINES_IN_ERRORS).map((l) => `\n  | ${l.text}`);
    return tail.length ? `; last console lines:${tail.join("")}` : "; the console is empty";
  }
}
