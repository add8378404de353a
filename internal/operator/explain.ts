// Every error ctl meets, as the one line it prints and its exit status: 2
// for a mistake in the command line, 1 for anything else. Whatever the
// error, the line is its message: never a stack, never source.
//
//   UsageError (cli_parse.ts)        ──▶ exit 2
//   OperatorError (config files, …)  ──▶ exit 1, as worded
//   NoCuratorError (no curator took the call: curator/client)
//     ──curatorFailureLine──▶ what happened at each, plus hints: the saved CA
//        does not trust the curator (credentials of an earlier cluster), or the
//        address is not routed here (another network namespace: network_hint.ts)
//   RpcError (a curator's answer)    ──▶ "<details> [CODE]"
//   anything else                    ──▶ its message

import { NoCuratorError } from "../curator/client/mod.ts";
import { deadlineReason, RpcError, Status } from "../rpc/mod.ts";
import { OperatorError, type ConfigPaths } from "./config_dir.ts";
import { UsageError } from "./cli_table.ts";
import { namespaceHint, type NamespaceHintOptions } from "./network_hint.ts";

export type ExitStatus = 1 | 2;

export function explain(err: unknown): { line: string; exitStatus: ExitStatus } {
  return { line: oneLine(describe(err)), exitStatus: err instanceof UsageError ? 2 : 1 };
}

function describe(err: unknown): string {
  if (err instanceof UsageError || err instanceof OperatorError) return err.message;
  if (err instanceof NoCuratorError) return curatorFailureLine(err, {});
  if (err instanceof RpcError) {
    if (err.code === Status.DEADLINE_EXCEEDED) return `${deadlineReason(err.details)} [DEADLINE_EXCEEDED]`;
    const failure = err.connectionFailure;
    if (failure) return failure.reason;
    const hint = err.code === Status.UNAVAILABLE ? " (is the cluster up, and are the endpoints in the config dir current?)" : "";
    return `${err.details} [${Status[err.code] ?? err.code}]${hint}`;
  }
  const system = systemErrorLine(err);
  if (system) return system;
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** What the file system's error codes mean, in words. */
const SYSTEM_ERRORS: Record<string, string> = {
  ENOENT: "no such file or directory",
  EEXIST: "already exists",
  EACCES: "permission denied",
  EPERM: "not permitted",
  EISDIR: "is a directory, not a file",
  ENOTDIR: "a part of the path is not a directory",
  ENOSPC: "no space left on the device",
  EROFS: "the file system is read-only",
};

/** A file system error (ENOENT on the owner's own path, say) as "<path>: <what it means>", without the syscall's jargon. */
function systemErrorLine(err: unknown): string | undefined {
  const { code, path, dest } = (err ?? {}) as { code?: unknown; path?: unknown; dest?: unknown };
  if (typeof code !== "string" || !(code in SYSTEM_ERRORS)) return undefined;
  const where = typeof dest === "string" && code === "EEXIST" ? dest : typeof path === "string" ? path : undefined;
  return where ? `${where}: ${SYSTEM_ERRORS[code]}` : `${SYSTEM_ERRORS[code]} (${code})`;
}

/**
 * What happened at each curator, and what the owner can do about it: the
 * failures name their causes (curator/client's failover.ts), the hints
 * say what they mean for ctl's saved credentials and where ctl runs.
 */
export function curatorFailureLine(err: NoCuratorError, options: { files?: ConfigPaths | undefined } & NamespaceHintOptions): string {
  const { files } = options;
  const hints: string[] = [];
  if (err.failures.some((f) => f.kind === "untrusted")) {
    hints.push(
      `the curator's certificate is not trusted by the saved CA${files ? ` (${files.ca})` : ""}, so these credentials are likely from an earlier launch of the cluster: run 'ctl takeownership <node address>' again`,
    );
  }
  if (err.failures.some((f) => f.kind === "dropped" || f.kind === "deadline")) {
    hints.push("a call that dropped or ran out of time may still have been carried out; running the same command again is safe");
  }
  const unreached = err.failures.filter((f) => f.kind === "refused" || f.kind === "unreachable" || f.kind === "timeout").map((f) => f.endpoint.host);
  const namespace = unreached.length > 0 ? namespaceHint(unreached, options) : undefined;
  if (namespace) hints.push(namespace);
  return [err.message, ...hints].join("; ");
}

/** Messages of other libraries may span lines; ctl prints one. */
function oneLine(text: string): string {
  return text.replace(/\s*\n\s*/g, " ").trim();
}
