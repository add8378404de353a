// One Kubernetes binary as a supervised child process: its klog output
// parsed into the node's log, its status line kept (starting, running,
// restarting with the number of starts and how the last run ended), and
// healthy only once its own readiness check passes.

import { join } from "node:path";
import { privateKeyPem, toPem } from "../pki/mod.ts";
import { runProcess, sleep, type ParsedLine, type RunContext, type Runnable } from "../supervisor/mod.ts";
import type { Credential } from "./pki.ts";

export type ComponentState = "waiting" | "starting" | "running" | "restarting";

/** How long one health answer may take, unless the caller says otherwise. */
const HEALTH_TIMEOUT_MS = 2_000;
/**
 * How a starting component is asked whether it is ready: an answer may take
 * READINESS_TIMEOUT_MS, and the next question comes READINESS_POLL_MS after
 * the last answer. A loaded apiserver answers /readyz late; asked again at
 * 2 s and every 250 ms (as until 2026-11-28), it threw the work of each
 * late answer away and was asked for more: a TLS handshake, an
 * authentication and readyz's own etcd read, on the node that runs it, for
 * the minutes it starts under emulation.
 */
export const READINESS_TIMEOUT_MS = 15_000;
export const READINESS_POLL_MS = 1_000;

const KLOG_LEVELS: Record<string, ParsedLine["level"]> = { I: "info", W: "warn", E: "error", F: "error" };

/**
 * One klog line (`I1123 17:40:00.123456    1234 file.go:12] message`) as a
 * log entry; other lines are left as they are.
 */
export function parseKlogLine(line: string): ParsedLine | undefined {
  const match = /^([IWEF])\d{4} \d{2}:\d{2}:\d{2}\.\d+\s+\d+ ([^\]]+)\] (.*)$/s.exec(line);
  if (!match) return undefined;
  const [, severity = "I", source = "", message = ""] = match;
  return { level: KLOG_LEVELS[severity] ?? "info", message, fields: { source } };
}

/**
 * What a health endpoint must answer: 200 with "ok" as its body (the
 * Kubernetes components' /healthz and /readyz), or any 200 (kube-proxy's
 * /healthz answers JSON, CoreDNS's /ready "OK").
 */
export type HealthAnswer = "ok" | "any-200";

/**
 * Whether a health endpoint gives `want`'s answer: over TLS with a client
 * certificate (`as`) and the CA the server's certificate chains to, or
 * plain HTTP without them.
 */
export async function answersOk(
  url: string,
  as?: { ca: Credential["certificate"]; client: Credential },
  signal?: AbortSignal,
  want: HealthAnswer = "ok",
  timeoutMs: number = HEALTH_TIMEOUT_MS,
): Promise<boolean> {
  try {
    const response = await fetch(url, {
      signal: signal ? AbortSignal.any([signal, AbortSignal.timeout(timeoutMs)]) : AbortSignal.timeout(timeoutMs),
      ...(as ? { tls: { ca: toPem(as.ca), cert: toPem(as.client.certificate), key: privateKeyPem(as.client.privateKey) } } : {}),
    } as RequestInit);
    const body = (await response.text()).trim();
    return response.ok && (want === "any-200" || body === "ok");
  } catch {
    return false;
  }
}

/** Waits until answersOk(url, as, want) holds: a starting component's readiness. */
export async function untilOk(url: string, as: Parameters<typeof answersOk>[1], signal: AbortSignal, want: HealthAnswer = "ok"): Promise<void> {
  while (!(await answersOk(url, as, signal, want, READINESS_TIMEOUT_MS))) await sleep(READINESS_POLL_MS, signal);
}

export interface ComponentOptions {
  binDir: string;
  report: (component: string, state: ComponentState, message: string) => void;
}

/** A component as a runnable that counts its starts and says how its last run ended. */
export function component(
  options: ComponentOptions,
  name: string,
  args: readonly string[],
  extra: {
    ready: (signal: AbortSignal) => Promise<void>;
    after?: (ctx: RunContext) => Promise<void>;
    onSpawn?: (pid: number) => void;
    env?: Record<string, string>;
  },
): Runnable {
  let starts = 0;
  let lastFailure = "";
  return async (ctx) => {
    if (extra.after) await extra.after(ctx);
    starts++;
    options.report(name, starts === 1 ? "starting" : "restarting", starts === 1 ? "" : `start ${starts}; the last run ended: ${lastFailure}`);
    try {
      await runProcess(ctx, {
        command: join(options.binDir, name),
        args,
        parseLine: parseKlogLine,
        ...(extra.env ? { env: extra.env } : {}),
        ...(extra.onSpawn ? { onSpawn: extra.onSpawn } : {}),
        ready: async (signal) => {
          await extra.ready(signal);
          options.report(name, "running", starts === 1 ? "" : `after ${starts} starts`);
        },
      });
    } catch (error) {
      lastFailure = (error as Error).message;
      throw error;
    }
  };
}
