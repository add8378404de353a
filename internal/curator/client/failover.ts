// Calling "the cluster": what counts as a curator failing, and the error
// that lists them when none answered.
//
// Each endpoint gets CONNECT_TIMEOUT_MS to connect. A curator that is down,
// refuses the connection, fails its identity check, or answers UNAVAILABLE
// (not the leader) or DEADLINE_EXCEEDED makes the call move on; any other
// answer (a refusal, a not-found) is final and returned as it is. When none
// answers, the error lists what happened at each, saying which were
// unreachable and which were not trusted. The order of the attempts is the
// pool's (pool.ts).

import { RpcError, Status } from "../../rpc/mod.ts";
import { formatEndpoint, type CuratorEndpoint } from "./endpoint.ts";

/** How long a curator gets to accept a connection before the next one is tried. */
export const CONNECT_TIMEOUT_MS = 3_000;

/** What happened at one curator. */
export interface CuratorFailure {
  endpoint: CuratorEndpoint;
  kind: "unreachable" | "untrusted" | "unavailable";
  reason: string;
  /** The error the curator answered with, when it answered. */
  error?: unknown;
}

export class NoCuratorError extends Error {
  override name = "NoCuratorError";
  readonly failures: CuratorFailure[];
  constructor(failures: CuratorFailure[]) {
    const untrusted = failures.filter((f) => f.kind === "untrusted");
    const head = failures.length === 0
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
  /** Told of each attempt, for CLIs that show progress. */
  progress?: (line: string) => void;
  /** Whether an error from one curator means trying the next; the default moves on for UNAVAILABLE and DEADLINE_EXCEEDED. */
  tryNextAfter?: (err: unknown) => boolean;
}

export function unavailableOrDeadline(err: unknown): boolean {
  return err instanceof RpcError && (err.code === Status.UNAVAILABLE || err.code === Status.DEADLINE_EXCEEDED);
}
