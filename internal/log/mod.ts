// Package log: structured, per-component logging for every part of the node.
//
// Every runnable logs through its own Logger, named by its dotted path in the
// supervision tree (`root.roleserve.controlplane`). Loggers are thin handles
// over one shared consola instance, whose reporter decides the output form:
//
//   logger.info("got membership", { node: "node-1a2b" })
//        │
//        ▼
//   consola (level filter, no throttling)
//        │
//        ├─ text reporter  →  "12:00:01.234 I root.roleserve got membership node=node-1a2b"
//        │                    (serial console, terminals)
//        ├─ json reporter  →  {"time":"…","level":"info","component":"root.roleserve",
//        │                     "msg":"got membership","node":"node-1a2b"}  (machines)
//        └─ extra sinks    →  tests capture entries; the node keeps a recent-log ring
//
// Invariants: a log call never throws and never blocks on I/O the caller can
// see; field values are serialised as given (strings unquoted in text form).

import { createConsola, type ConsolaInstance, type ConsolaReporter, type LogObject } from "consola/core";

export { formatBytes } from "./units.ts";

export type Level = "debug" | "info" | "warn" | "error";

/** One structured log entry as reporters and sinks see it. */
export interface LogEntry {
  time: Date;
  level: Level;
  component: string;
  message: string;
  fields: Record<string, unknown>;
}

export type LogSink = (entry: LogEntry) => void;

export interface Logger {
  readonly component: string;
  debug(message: string, fields?: Record<string, unknown>): void;
  info(message: string, fields?: Record<string, unknown>): void;
  warn(message: string, fields?: Record<string, unknown>): void;
  error(message: string, fields?: Record<string, unknown>): void;
  /** A logger for a sub-component: `root` → `root.<name>`. */
  child(name: string): Logger;
}

export type LogFormat = "text" | "json";

/** Environment variables that choose the output form and verbosity. */
export const LOG_FORMAT_ENV = "NODECORE_LOG_FORMAT";
export const LOG_LEVEL_ENV = "NODECORE_LOG_LEVEL";

const CONSOLA_LEVELS: Record<Level, number> = { error: 0, warn: 1, info: 3, debug: 4 };
const LEVEL_LETTERS: Record<Level, string> = { debug: "D", info: "I", warn: "W", error: "E" };

function levelOf(object: LogObject): Level {
  switch (object.type) {
    case "error":
    case "fatal":
      return "error";
    case "warn":
      return "warn";
    case "debug":
    case "trace":
    case "verbose":
      return "debug";
    default:
      return "info";
  }
}

function entryOf(object: LogObject): LogEntry {
  const fields = (object as LogObject & { fields?: Record<string, unknown> }).fields ?? {};
  return {
    time: object.date,
    level: levelOf(object),
    component: object.tag,
    message: object.args.map(String).join(" "),
    fields,
  };
}

function formatValue(value: unknown): string {
  if (value instanceof Error) return JSON.stringify(value.message);
  if (typeof value === "string") return /[\s"=]/.test(value) || value === "" ? JSON.stringify(value) : value;
  return JSON.stringify(value) ?? String(value);
}

/** The human form: one line per entry, fit for a serial console. */
export function formatText(entry: LogEntry): string {
  const time = entry.time.toISOString().slice(11, 23);
  const fields = Object.entries(entry.fields)
    .map(([k, v]) => ` ${k}=${formatValue(v)}`)
    .join("");
  return `${time} ${LEVEL_LETTERS[entry.level]} ${entry.component} ${entry.message}${fields}`;
}

/** The machine form: one JSON object per line. */
export function formatJson(entry: LogEntry): string {
  const fields: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(entry.fields)) fields[k] = v instanceof Error ? v.message : v;
  return JSON.stringify({
    time: entry.time.toISOString(),
    level: entry.level,
    component: entry.component,
    msg: entry.message,
    ...fields,
  });
}

class ConsolaLogger implements Logger {
  constructor(
    private readonly consola: ConsolaInstance,
    readonly component: string,
  ) {}

  private log(level: Level, message: string, fields?: Record<string, unknown>): void {
    try {
      this.consola[level]({ message, tag: this.component, fields: fields ?? {} });
    } catch {
      // Logging must never take the caller down (PID 1 logs through this).
    }
  }

  debug(message: string, fields?: Record<string, unknown>): void {
    this.log("debug", message, fields);
  }
  info(message: string, fields?: Record<string, unknown>): void {
    this.log("info", message, fields);
  }
  warn(message: string, fields?: Record<string, unknown>): void {
    this.log("warn", message, fields);
  }
  error(message: string, fields?: Record<string, unknown>): void {
    this.log("error", message, fields);
  }
  child(name: string): Logger {
    return new ConsolaLogger(this.consola, this.component ? `${this.component}.${name}` : name);
  }
}

export interface LoggerOptions {
  /** Output form on stderr; "none" writes only to sinks. Default: from NODECORE_LOG_FORMAT, else text. */
  format?: LogFormat | "none" | undefined;
  level?: Level;
  /** Further receivers of every entry (tests, the node's recent-log ring). */
  sinks?: LogSink[];
  /** Bounds what some components write on stderr (a node's serial console); sinks get every entry. */
  budget?: OutputBudget;
}

/**
 * How many lines of a component reach stderr: a token bucket per component
 * that `applies` to, of `burst` lines refilled at `perSecond`. Lines over it
 * are counted, and a line saying how many, and where to read them, takes
 * their place once the bucket has room again (or after NOTE_AFTER_MS).
 */
export interface OutputBudget {
  applies(component: string): boolean;
  burst: number;
  perSecond: number;
  /** Where the lines not shown can be read, for the note. */
  readThem: string;
}

/** How long after the first line held back a note about it is written at the latest. */
const NOTE_AFTER_MS = 10_000;

/** `write` limited by `budget`; see OutputBudget. */
export function budgeted(write: LogSink, budget: OutputBudget, now: () => number = Date.now): LogSink {
  const buckets = new Map<string, { tokens: number; at: number; held: number; timer?: ReturnType<typeof setTimeout> | undefined }>();
  const note = (component: string) => {
    const bucket = buckets.get(component);
    if (!bucket || bucket.held === 0) return;
    clearTimeout(bucket.timer);
    bucket.timer = undefined;
    const held = bucket.held;
    bucket.held = 0;
    write({
      time: new Date(now()),
      level: "info",
      component,
      message: `${held} lines of this component not shown here (more than ${budget.burst} at once, or ${budget.perSecond} a second); ${budget.readThem}`,
      fields: {},
    });
  };
  return (entry) => {
    if (!budget.applies(entry.component)) return write(entry);
    const at = now();
    let bucket = buckets.get(entry.component);
    if (!bucket) buckets.set(entry.component, (bucket = { tokens: budget.burst, at, held: 0 }));
    bucket.tokens = Math.min(budget.burst, bucket.tokens + ((at - bucket.at) / 1000) * budget.perSecond);
    bucket.at = at;
    if (bucket.tokens < 1) {
      bucket.held++;
      if (!bucket.timer) {
        bucket.timer = setTimeout(() => note(entry.component), NOTE_AFTER_MS);
        bucket.timer.unref?.();
      }
      return;
    }
    bucket.tokens--;
    note(entry.component);
    write(entry);
  };
}

function writerFor(format: LogFormat, budget?: OutputBudget): LogSink {
  const formatter = format === "json" ? formatJson : formatText;
  const write: LogSink = (entry) => process.stderr.write(formatter(entry) + "\n");
  return budget ? budgeted(write, budget) : write;
}

/** Creates the logger of a top-level component; everything below uses child(). */
export function createLogger(component: string, options: LoggerOptions = {}): Logger {
  const envFormat = process.env[LOG_FORMAT_ENV];
  const format = options.format ?? (envFormat === "json" ? "json" : "text");
  const envLevel = process.env[LOG_LEVEL_ENV] as Level | undefined;
  const level = options.level ?? (envLevel && envLevel in CONSOLA_LEVELS ? envLevel : "info");
  const sinks = [...(options.sinks ?? [])];
  if (format !== "none") sinks.push(writerFor(format, options.budget));
  const reporter: ConsolaReporter = {
    log(object) {
      const entry = entryOf(object);
      for (const sink of sinks) sink(entry);
    },
  };
  const consola = createConsola({ reporters: [reporter], level: CONSOLA_LEVELS[level], throttle: 0 });
  return new ConsolaLogger(consola, component);
}

/** A logger that keeps its entries in memory, for tests. */
export function captureLogger(component: string, options: { echo?: boolean } = {}): { logger: Logger; entries: LogEntry[] } {
  const entries: LogEntry[] = [];
  const logger = createLogger(component, {
    format: options.echo ? undefined : "none",
    level: "debug",
    sinks: [(entry) => entries.push(entry)],
  });
  return { logger, entries };
}
