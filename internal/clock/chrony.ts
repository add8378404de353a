// Time sync: chronyd (Debian's chrony) under the supervisor, told its
// servers by the node, and watched through what it logs.
//
//   servers (DHCP option 42, node parameters) ─▶ chrony.conf ─▶ chronyd -d
//        none: the "time" line says so, and nothing runs        │ its log lines
//                                                               ▼
//   "Selected source S" ─▶ synced to S      "Can't synchronise" ─▶ unsynced
//   "System clock wrong by N seconds" / "was stepped by N" ─▶ the correction
//                                                               │
//                                Value<TimeSync> ◀──────────────┘ ─▶ "time" service line
//
// chronyd steps a clock that is more than STEP_THRESHOLD_S off in its
// first STEP_UPDATES updates (a VM that starts hours off is right at once,
// before any certificate is checked), then slews. A node process shares
// its host's clock: its chronyd measures, and never sets it (-x).
//
// Before chronyd starts, one query to the servers (first_answer.ts) sets a
// clock that is off at once and opens the boot gate: chronyd needs four
// exchanges two seconds apart before it selects a source. While chronyd
// has not synced, that query is asked again every RECOVERY_PROBE_MS; a
// server that answers starts the whole over (a server back in reach).

import { writeFileSync, mkdirSync } from "node:fs";
import { isIP } from "node:net";
import { join } from "node:path";
import { firstAnswer } from "./first_answer.ts";
import type { Value } from "../event/mod.ts";
import { setWallClock } from "../sys/mod.ts";
import { RestartRequest, runProcess, sleep, untilCancelled, type ParsedLine, type Runnable } from "../supervisor/mod.ts";

/** chronyd in the node image (image/initramfs.ts) and on Debian. */
export const CHRONYD_BINARY = "/usr/sbin/chronyd";
/** The service line that says how the clock syncs. */
export const TIME_LINE = "time";
/** The most servers kept, in order of preference. */
export const MAX_TIME_SERVERS = 8;
/** A clock further off than this, in seconds, is stepped at once... */
export const STEP_THRESHOLD_S = 1;
/** ...in the first this many updates. */
export const STEP_UPDATES = 3;
/**
 * chronyd says "Selected source", then "System clock wrong by", then steps
 * the clock and says "was stepped by", all in one turn of its loop. A new
 * state is published this long after the last line that said something,
 * or at once after a step, so that the boot gate never opens between the
 * selection and the step.
 */
export const SETTLE_MS = 250;
/** The longest poll interval, as a power of 2 in seconds (6: 64 s, which is also chrony's default shortest; its default longest is 10). */
export const MAX_POLL = 6;

/**
 * While the clock is not synced, how often the servers are asked once
 * (first_answer.ts), and how long after chronyd's start the first such ask
 * waits. chronyd asks a server that was out of reach only every 64 s
 * (MAX_POLL) and wants several answers before it selects it: a node whose
 * server came back stayed unsynced (and CLOCK_SKEW) for 2-3 minutes. When
 * a server answers the one query, the runnable starts over: its first
 * query sets the clock, and chronyd starts afresh with iburst.
 */
export const RECOVERY_PROBE_MS = 15_000;
export const RECOVERY_AFTER_MS = 30_000;

/** How the node's clock syncs, as chronyd says. */
export type TimeSync =
  | { state: "no-servers" }
  | { state: "starting"; servers: readonly string[] }
  | { state: "synced"; source: string; sinceMs: number; correctionS?: number }
  | { state: "unsynced"; reason: string; correctionS?: number };

/** A host name or IP address chrony can be told; undefined if it is none (it would end up in the configuration: no spaces, no newlines). */
export function timeServerProblem(server: string): string | undefined {
  if (server.length === 0) return "is empty";
  if (server.length > 253) return `${server.length} characters, more than 253`;
  if (isIP(server) !== 0) return undefined;
  if (!/^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$/.test(server)) return "is neither an IP address nor a host name";
  return undefined;
}

export interface ChronyConfigOptions {
  servers: readonly string[];
  /** Where chronyd keeps its drift and pid files. */
  stateDir: string;
  /** Poll fast (every second): tests. */
  fastPoll?: boolean;
}

/** chrony.conf: the servers, stepping at start, and nothing served (no NTP port, no command port). */
export function chronyConfig(options: ChronyConfigOptions): string {
  for (const server of options.servers) {
    const problem = timeServerProblem(server);
    if (problem) throw new Error(`time server ${JSON.stringify(server.slice(0, 80))} ${problem}`);
  }
  // chronyd backs off from a server that does not answer (to 1024 s by
  // default); MAX_POLL caps that at 64 s, chrony's own default shortest
  // interval, so that a node whose server was out of reach syncs within
  // about two minutes of it coming back (CI's time e2e: 210 s at 128 s).
  const poll = options.fastPoll ? " minpoll -2 maxpoll 0" : ` maxpoll ${MAX_POLL}`;
  return [
    "# Written by nodecore (internal/clock/chrony.ts) at each start.",
    ...options.servers.slice(0, MAX_TIME_SERVERS).map((s) => `server ${s} iburst${poll}`),
    `makestep ${STEP_THRESHOLD_S} ${STEP_UPDATES}`,
    // A client only: no NTP port, no command port.
    "port 0",
    "cmdport 0",
    `driftfile ${join(options.stateDir, "drift")}`,
    `pidfile ${join(options.stateDir, "chronyd.pid")}`,
    "",
  ].join("\n");
}

/** What one of chronyd's log lines says about the sync, if anything. */
export type ChronyEvent = { kind: "selected"; source: string } | { kind: "unselectable"; reason: string } | { kind: "correction"; seconds: number; stepped: boolean };

/** Reads a chronyd line ("2026-11-25T15:26:59Z Selected source 10.0.0.1", with or without the time). */
export function chronyEvent(line: string): ChronyEvent | undefined {
  const text = line.replace(/^\d{4}-\d\d-\d\dT\S+\s+/, "").trim();
  let m = /^Selected source (\S+)/.exec(text);
  if (m) return { kind: "selected", source: m[1]! };
  m = /^System clock (wrong by|was stepped by) (-?\d+(?:\.\d+)?) seconds/.exec(text);
  if (m) return { kind: "correction", seconds: Number(m[2]), stepped: m[1] === "was stepped by" };
  if (/^Can't synchronise/.test(text) || /^No suitable source/.test(text)) return { kind: "unselectable", reason: text.slice(0, 200) };
  return undefined;
}

/** The next state after an event. */
export function nextSync(now: TimeSync, event: ChronyEvent, nowMs = Date.now()): TimeSync {
  const correction = "correctionS" in now && now.correctionS !== undefined ? { correctionS: now.correctionS } : {};
  switch (event.kind) {
    case "selected":
      return { state: "synced", source: event.source, sinceMs: nowMs, ...correction };
    case "unselectable":
      return { state: "unsynced", reason: event.reason, ...correction };
    case "correction":
      return { ...now, correctionS: event.seconds } as TimeSync;
  }
}

/** The "time" line for a state. */
export function describeSync(sync: TimeSync): { state: string; message: string } {
  switch (sync.state) {
    case "no-servers":
      return { state: "unsynced", message: "no time servers: neither the DHCP lease (option 42) nor the node parameters name any" };
    case "starting":
      return { state: "starting", message: `syncing with ${sync.servers.join(", ")}` };
    case "synced":
      return { state: "synced", message: `synced to ${sync.source} since ${new Date(sync.sinceMs).toISOString()}${sync.correctionS !== undefined ? `; corrected by ${sync.correctionS} s` : ""}` };
    case "unsynced":
      return { state: "unsynced", message: sync.reason };
  }
}

export interface TimeSyncOptions {
  /** The servers, once known (the parameters', the DHCP lease's); read once at each start of the runnable. */
  servers: (signal: AbortSignal) => Promise<readonly string[]>;
  stateDir: string;
  /** Written: how the clock syncs. */
  sync: Value<TimeSync>;
  /** The "time" service line. */
  report: (state: string, message: string) => void;
  binary?: string;
  /** false: measure only, never set the clock (a node process shares its host's). */
  setClock: boolean;
  fastPoll?: boolean;
  /** The first query's servers' port (tests; default NTP_PORT). */
  ntpPort?: number;
  /** RECOVERY_PROBE_MS and RECOVERY_AFTER_MS (tests). */
  recovery?: { probeMs: number; afterMs: number };
}

export function timeSyncRunnable(options: TimeSyncOptions): Runnable {
  return async (ctx) => {
    const servers = (await options.servers(ctx.signal)).filter((s) => timeServerProblem(s) === undefined).slice(0, MAX_TIME_SERVERS);
    const publish = (sync: TimeSync) => {
      options.sync.set(sync);
      const line = describeSync(sync);
      options.report(line.state, line.message);
    };
    if (servers.length === 0) {
      publish({ state: "no-servers" });
      ctx.logger.warn("no time servers: the clock is not synced (DHCP option 42 or the node parameters name them)");
      ctx.signalHealthy();
      await untilCancelled(ctx.signal);
      return;
    }
    mkdirSync(options.stateDir, { recursive: true, mode: 0o700 });
    const config = join(options.stateDir, "chrony.conf");
    writeFileSync(config, chronyConfig({ servers, stateDir: options.stateDir, ...(options.fastPoll ? { fastPoll: true } : {}) }));
    let sync: TimeSync = { state: "starting", servers };
    let settle: ReturnType<typeof setTimeout> | undefined;
    publish(sync);
    const first = await firstAnswer(servers, { signal: ctx.signal, ...(options.ntpPort !== undefined ? { port: options.ntpPort } : {}) });
    if (first) {
      const off = Math.abs(first.offsetMs) > STEP_THRESHOLD_S * 1000;
      if (off && options.setClock) setWallClock(Date.now() + first.offsetMs);
      const correctionS = Math.round(first.offsetMs) / 1000;
      sync = { state: "synced", source: first.server, sinceMs: Date.now(), ...(off && options.setClock ? { correctionS } : {}) };
      publish(sync);
      const said = !off
        ? "the first server's answer agrees with the clock"
        : options.setClock
          ? "the clock was stepped to the first server's answer"
          : "the first server's answer says the clock is off; this node does not set it";
      ctx.logger.info(said, { server: first.server, offsetS: correctionS, delayMs: Math.round(first.delayMs) });
    } else {
      ctx.logger.info("no server answered the first query; chronyd will keep asking", { servers: servers.join(",") });
    }
    ctx.logger.info("starting chronyd", { servers: servers.join(",") });
    const chronydStarted = Date.now();
    // While chronyd has not synced, the servers are asked once now and
    // then; one that answers ends this start (RestartRequest, no backoff).
    const recovery = options.recovery ?? { probeMs: RECOVERY_PROBE_MS, afterMs: RECOVERY_AFTER_MS };
    // Read through a function: chronyd's lines change `sync` while this waits.
    const unsynced = () => sync.state !== "synced";
    const answeredAgain = (async () => {
      await sleep(recovery.afterMs, ctx.signal);
      for (;;) {
        if (unsynced()) {
          const answer = await firstAnswer(servers, { signal: ctx.signal, ...(options.ntpPort !== undefined ? { port: options.ntpPort } : {}) });
          if (answer && unsynced()) return answer;
        }
        await sleep(recovery.probeMs, ctx.signal);
      }
    })();
    const restart = answeredAgain.then((answer) => {
      throw new RestartRequest(
        `${answer.server} answers, and chronyd has not synced in the ${Math.round((Date.now() - chronydStarted) / 1000)} s since it started: starting over (the first query sets the clock, chronyd asks afresh)`,
      );
    });
    const chronyd = runProcess(ctx, {
      command: options.binary ?? CHRONYD_BINARY,
      // -d: stay in front, log to stderr; -u root: no user to drop to in the image.
      args: ["-d", "-u", "root", ...(options.setClock ? [] : ["-x"]), "-f", config],
      // Not chronyd.pid: chronyd refuses to start while its own pid file names a live process.
      pidFile: join(options.stateDir, "runner.pid"),
      parseLine: (line): ParsedLine | undefined => {
        const event = chronyEvent(line);
        if (event) {
          sync = nextSync(sync, event);
          clearTimeout(settle);
          if (event.kind === "correction" && event.stepped) publish(sync);
          else settle = setTimeout(() => publish(sync), SETTLE_MS);
        }
        return undefined;
      },
    }).finally(() => clearTimeout(settle));
    // Whichever ends first: chronyd (a failure, restarted with backoff) or a server answering while unsynced.
    await Promise.race([chronyd, restart]);
  };
}
