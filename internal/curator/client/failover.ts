// Calling "the cluster": what counts as a curator failing, how each failure
// is described, and the error that lists them when none answered.
//
// Each endpoint gets CONNECT_TIMEOUT_MS to connect, or CONNECT_PATIENCE_MS
// when its host is seen to accept TCP connections (patience.ts). A curator that is down,
// refuses the connection, fails its identity check, or answers UNAVAILABLE
// (not the leader) or DEADLINE_EXCEEDED makes the call move on; any other
// answer (a refusal, a not-found) is final and returned as it is. When none
// answers, the error lists what happened at each, each in words that name
// the cause:
//
//   refused      connection refused at 10.0.0.2:7835           (nothing listens there)
//   unreachable  no route to 10.0.0.2:7835 (host unreachable)  (EHOSTUNREACH, ENETUNREACH)
//   timeout      timed out: no connection within 3 s           (SYN unanswered)
//                timed out: its host accepts connections, but no TLS handshake finished within 15 s
//   untrusted    its certificate is not signed by the cluster CA (...)
//   identity     expected curator node-… at 10.0.0.2, but node-… answered (identity.ts)
//   failed       connection failed: <what the socket said>
//   unavailable  what it answered (not the leader, ...)
//   dropped      the connection dropped during the call (its server went away mid-call)
//   deadline     deadline exceeded: no answer within 15 s
//
// A call that dropped or ran out of time may have been carried out: the
// operator is told so (operator/explain.ts), and that running it again is
// safe (every write of the owner's API is idempotent).
//
// The order of the attempts is the pool's (pool.ts); it also reads why a
// connection failed, which grpc-js tells only to calls (RpcError.connectionFailure).

import { deadlineReason, RpcError, Status } from "../../rpc/mod.ts";
import { formatAddress, formatEndpoint, type CuratorEndpoint } from "./endpoint.ts";

/** How long a curator gets to accept a connection before the next one is tried. */
export const CONNECT_TIMEOUT_MS = 3_000;

/** What happened at one curator; see the file comment. */
export type CuratorFailureKind = "refused" | "unreachable" | "timeout" | "untrusted" | "identity" | "failed" | "unavailable" | "dropped" | "deadline";

/** What happened at one curator. */
export interface CuratorFailure {
  endpoint: CuratorEndpoint;
  kind: CuratorFailureKind;
  reason: string;
  /** The error the curator answered with, when it answered. */
  error?: unknown;
}

/** Why a connection failed, as grpc-js said it (see RpcError.connectionFailure). */
export type ConnectionFailure = NonNullable<RpcError["connectionFailure"]>;

export class NoCuratorError extends Error {
  override name = "NoCuratorError";
  readonly failures: CuratorFailure[];
  constructor(failures: CuratorFailure[]) {
    const untrusted = failures.filter((f) => f.kind === "untrusted" || f.kind === "identity");
    const head =
      failures.length === 0
        ? "no curator is known"
        : untrusted.length === failures.length
          ? `no curator could be trusted (${failures.length} tried)`
          : `no curator answered (${failures.length} tried)`;
    super(`${head}: ${failures.map((f) => `${formatEndpoint(f.endpoint)}: ${f.reason}`).join("; ")}`);
    this.failures = failures;
  }
}

export interface FailoverOptions {
  connectTimeoutMs?: number;
  /** How long a curator whose host accepts TCP connections gets to finish its handshake (patience.ts). */
  connectPatienceMs?: number;
  /** Told of each attempt, for CLIs that show progress. */
  progress?: (line: string) => void;
  /** Whether an error from one curator means trying the next; the default moves on for UNAVAILABLE and DEADLINE_EXCEEDED. */
  tryNextAfter?: (err: unknown) => boolean;
  /** How long to keep asking while every curator that answered says no curator leads yet (pool.ts; default ELECTION_PATIENCE_MS). */
  electionPatienceMs?: number;
}

export function unavailableOrDeadline(err: unknown): boolean {
  return err instanceof RpcError && (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED);
}

/** How a connection attempt to a curator ended when it did not connect. */
export type ConnectOutcome = { result: "timeout"; timeoutMs: number; accepted?: boolean } | { result: "failed"; identityProblem?: string | undefined; failure?: ConnectionFailure | undefined };

/** A curator that did not connect, described by what stopped it. */
export function connectFailure(endpoint: CuratorEndpoint, outcome: ConnectOutcome): CuratorFailure {
  if (outcome.result === "timeout") {
    const within = `${outcome.timeoutMs / 1000} s`;
    return outcome.accepted
      ? { endpoint, kind: "timeout", reason: `timed out: its host accepts connections, but no TLS handshake finished within ${within} (the node is busy, or no curator serves that port)` }
      : { endpoint, kind: "timeout", reason: `timed out: no connection within ${within}` };
  }
  if (outcome.identityProblem !== undefined) return { endpoint, kind: "identity", reason: outcome.identityProblem };
  const failure = outcome.failure;
  const address = formatAddress(endpoint);
  if (failure === undefined) return { endpoint, kind: "failed", reason: "connection failed (no reason given)" };
  switch (failure.kind) {
    case "refused":
      return { endpoint, kind: "refused", reason: `connection refused at ${address}` };
    case "unreachable":
      return { endpoint, kind: "unreachable", reason: `no route to ${address} (${failure.errno === "ENETUNREACH" ? "network" : "host"} unreachable)` };
    case "untrusted":
      return { endpoint, kind: "untrusted", reason: `its certificate is not signed by the cluster CA (${failure.cause})` };
    case "identity":
      return { endpoint, kind: "identity", reason: failure.reason };
    case "failed":
      return { endpoint, kind: "failed", reason: failure.reason };
    default: {
      const never: never = failure.kind;
      throw new Error(`unknown connection failure ${String(never)}`);
    }
  }
}

/**
 * A curator that answered an error that makes the call move on
 * (tryNextAfter). `elapsedMs`: how long the call took, as the caller
 * measured it.
 */
export function answerFailure(endpoint: CuratorEndpoint, err: unknown, elapsedMs?: number): CuratorFailure {
  if (err instanceof RpcError && err.code === Status.DEADLINE_EXCEEDED) {
    return { endpoint, kind: "deadline", reason: deadlineReason(err.details, elapsedMs), error: err };
  }
  // grpc-js's words for a connection that went away under a call: the call may have been carried out.
  if (err instanceof RpcError && err.code === Status.UNAVAILABLE && /Connection dropped|RST_STREAM|ECONNRESET|socket hang up/i.test(err.details)) {
    return { endpoint, kind: "dropped", reason: `the connection dropped during the call (${err.details})`, error: err };
  }
  const reason = err instanceof RpcError ? err.details : err instanceof Error ? err.message : String(err);
  return { endpoint, kind: "unavailable", reason, error: err };
}
