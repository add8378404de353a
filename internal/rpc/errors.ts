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
/** A bound was reached (too many watchers; a watcher that fell too far behind). */
export class ResourceExhaustedError extends DomainError {
  override name = "ResourceExhaustedError";
  readonly code = Status.RESOURCE_EXHAUSTED;
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
}

export function fromServiceError(err: ServiceError, method: string): RpcError {
  const trailers: Record<string, string> = {};
  for (const [key, value] of Object.entries(err.metadata?.getMap() ?? {})) if (typeof value === "string") trailers[key] = value;
  return new RpcError(err.code, err.details || err.message, method, { cause: err, trailers });
}

export { Status };
