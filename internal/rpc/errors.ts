// Domain errors and their one mapping to gRPC status codes.
//
// Handlers throw these (or any Error); the server adapter turns them into a
// status with a message that says why. Clients get an RpcError back, which
// carries the code and the server's message.

import { status as Status, type ServiceError } from "@grpc/grpc-js";

/**
 * A failure that has a meaning for the caller, mapped to one gRPC code.
 * `trailers` go to the caller as trailing metadata, for machine-readable
 * hints (such as where the curator leader is).
 */
export abstract class DomainError extends Error {
  abstract readonly code: Status;
  readonly trailers: Readonly<Record<string, string>>;
  constructor(message: string, options?: ErrorOptions & { trailers?: Record<string, string> }) {
    super(message, options);
    this.trailers = options?.trailers ?? {};
  }
}

export class InvalidArgumentError extends DomainError {
  override name = "InvalidArgumentError";
  readonly code = Status.INVALID_ARGUMENT;
}
export class NotFoundError extends DomainError {
  override name = "NotFoundError";
  readonly code = Status.NOT_FOUND;
}
export class AlreadyExistsError extends DomainError {
  override name = "AlreadyExistsError";
  readonly code = Status.ALREADY_EXISTS;
}
/** The caller is known but may not do this. */
export class PermissionDeniedError extends DomainError {
  override name = "PermissionDeniedError";
  readonly code = Status.PERMISSION_DENIED;
}
/** The caller did not prove who it is (no or foreign certificate). */
export class UnauthenticatedError extends DomainError {
  override name = "UnauthenticatedError";
  readonly code = Status.UNAUTHENTICATED;
}
/** The system is not in a state that allows this now (e.g. node not approved yet). */
export class FailedPreconditionError extends DomainError {
  override name = "FailedPreconditionError";
  readonly code = Status.FAILED_PRECONDITION;
}
/** Try again later or elsewhere (e.g. this curator is not the leader). */
export class UnavailableError extends DomainError {
  override name = "UnavailableError";
  readonly code = Status.UNAVAILABLE;
}
/** A concurrent change got there first (the record changed under a read-modify-write): running it again is safe. */
export class AbortedError extends DomainError {
  override name = "AbortedError";
  readonly code = Status.ABORTED;
}
/** A bound was reached (too many watchers; a watcher that fell too far behind). */
export class ResourceExhaustedError extends DomainError {
  override name = "ResourceExhaustedError";
  readonly code = Status.RESOURCE_EXHAUSTED;
}

/** The method exists in the service, but this server does not serve it (partialService's answer). */
export class UnimplementedError extends DomainError {
  override name = "UnimplementedError";
  readonly code = Status.UNIMPLEMENTED;
}

/** The status a thrown error becomes on the wire. Unknown errors are INTERNAL. */
export function toStatus(err: unknown): { code: Status; details: string; trailers?: Readonly<Record<string, string>> } {
  if (err instanceof DomainError) return { code: err.code, details: err.message, trailers: err.trailers };
  if (err instanceof Error && err.name === "AbortError") return { code: Status.CANCELLED, details: "call cancelled" };
  const message = err instanceof Error ? err.message : String(err);
  return { code: Status.INTERNAL, details: `internal error: ${message}` };
}

/** An error returned by a remote call: the status code, the server's message and its string trailers. */
export class RpcError extends Error {
  override name = "RpcError";
  readonly trailers: Readonly<Record<string, string>>;
  constructor(
    readonly code: Status,
    readonly details: string,
    readonly method: string,
    options?: ErrorOptions & { trailers?: Record<string, string> },
  ) {
    super(`${method}: ${Status[code] ?? code}: ${details}`, options);
    this.trailers = options?.trailers ?? {};
  }

  /** Why the call found no connection to its server, when that is why it failed (see connectionFailureOf). */
  get connectionFailure(): ConnectionFailure | undefined {
    return this.code === Status.UNAVAILABLE ? connectionFailureOf(this.details) : undefined;
  }
}

/**
 * Why a connection to a server failed, from what grpc-js says:
 *  - refused:     nothing listens there (ECONNREFUSED)
 *  - unreachable: no route to the address (EHOSTUNREACH, ENETUNREACH)
 *  - untrusted:   TLS: the server's certificate does not chain to the CA the client trusts
 *  - identity:    the certificate chains, but does not prove who the server must be (tls.ts)
 *  - failed:      anything else (reset, a handshake that broke off), in grpc-js's words
 */
export type ConnectionFailureKind = "refused" | "unreachable" | "untrusted" | "identity" | "failed";

export interface ConnectionFailure {
  kind: ConnectionFailureKind;
  /** What the socket or TLS said, without grpc-js's wrapping: "connect ECONNREFUSED 10.0.0.2:7835". */
  cause: string;
  /** The socket's error code, for refused and unreachable: "ECONNREFUSED", "EHOSTUNREACH", "ENETUNREACH". */
  errno?: string;
  /** The address the socket error names, as host:port ([host]:port for IPv6), when it names one. */
  address?: string;
  /** One line that names the cause: "connection refused at 10.0.0.2:7835". */
  reason: string;
}

/** How grpc-js opens the details of a call that its channel failed without connecting (pick-first, in TRANSIENT_FAILURE). */
const NO_CONNECTION = "No connection established. Last error: ";

/**
 * Classifies the details of a call that failed because its channel could
 * not connect, as grpc-js words them ("No connection established. Last
 * error: Error: connect ECONNREFUSED 10.0.0.2:7835 (<time>). Resolution
 * note: "); undefined for any other details. grpc-js keeps only the
 * message of the socket's error, not its code, so the codes are read from
 * the message, as Node and bun word them.
 */
export function connectionFailureOf(details: string): ConnectionFailure | undefined {
  const start = details.indexOf(NO_CONNECTION);
  if (start === -1) return undefined;
  const cause = details
    .slice(start + NO_CONNECTION.length)
    .replace(/\. Resolution note: .*$/s, "")
    .replace(/ \(\d{4}-\d\d-\d\dT[^)]*\)$/, "")
    .replace(/^(\w*Error: )+/, "")
    .trim();
  const socket = /\b(ECONNREFUSED|EHOSTUNREACH|ENETUNREACH)\b(?: (\S+))?/.exec(cause);
  if (socket) {
    const errno = socket[1]!;
    const address = socket[2] ? bracketed(socket[2]) : undefined;
    const at = address ?? "the server";
    const reason = errno === "ECONNREFUSED" ? `connection refused at ${at}` : `no route to ${at} (${errno === "ENETUNREACH" ? "network" : "host"} unreachable)`;
    return { kind: errno === "ECONNREFUSED" ? "refused" : "unreachable", cause, errno, ...(address ? { address } : {}), reason };
  }
  // ServerIdentityError (tls.ts): the chain was fine, the identity was not.
  if (/^server identity refused: |^the server presented no certificate/.test(cause)) {
    return { kind: "identity", cause, reason: cause.replace(/^server identity refused: /, "") };
  }
  // OpenSSL's verify errors, as Node ("self-signed certificate ...") and bun ("self signed certificate ...") word them.
  if (/certificate|self[- ]signed|issuer/i.test(cause)) {
    return { kind: "untrusted", cause, reason: `the server's certificate is not signed by the CA this client trusts (${cause})` };
  }
  return { kind: "failed", cause, reason: `connection failed: ${cause || "no reason given"}` };
}

/** "fd00::2:7835" (how socket errors name IPv6 addresses) as "[fd00::2]:7835". */
function bracketed(hostPort: string): string {
  const colon = hostPort.lastIndexOf(":");
  if (colon === -1) return hostPort;
  const host = hostPort.slice(0, colon);
  return host.includes(":") && !host.startsWith("[") ? `[${host}]${hostPort.slice(colon)}` : hostPort;
}

export function fromServiceError(err: ServiceError, method: string): RpcError {
  const trailers: Record<string, string> = {};
  for (const [key, value] of Object.entries(err.metadata?.getMap() ?? {})) if (typeof value === "string") trailers[key] = value;
  return new RpcError(err.code, err.details || err.message, method, { cause: err, trailers });
}

export { Status };

/**
 * Why a call ran out of time, in seconds when they are known: grpc-js's
 * client says "Deadline exceeded after 1.002s,LB pick: …" ("deadline
 * exceeded: no answer within 1 s"); under load the server's own timer (the
 * deadline the client sent) can fire first and say only "Deadline
 * exceeded": then `elapsedMs`, the caller's own measure, if it has one. A
 * server's own words for DEADLINE_EXCEEDED are kept.
 */
export function deadlineReason(details: string, elapsedMs?: number): string {
  const after = /^Deadline exceeded after (\d+(?:\.\d+)?)s/.exec(details);
  const seconds = after ? Number(after[1]) : details === "Deadline exceeded" && elapsedMs !== undefined ? elapsedMs / 1000 : undefined;
  if (seconds !== undefined) return `deadline exceeded: no answer within ${Number(seconds.toFixed(1))} s`;
  if (details === "Deadline exceeded") return "deadline exceeded: no answer within the call's deadline (--timeout)";
  return `deadline exceeded: ${details}`;
}
