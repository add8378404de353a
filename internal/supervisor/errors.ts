// Errors that runnables throw to talk to their supervisor.

/**
 * Thrown by a worker whose inputs changed in a way it cannot absorb (a role
 * was removed, the curator endpoint moved): the supervisor restarts it. It is
 * logged as a state change, not a failure, and a runnable that had become
 * healthy is restarted without backoff delay.
 */
export class RestartRequest extends Error {
  override name = "RestartRequest";
}

/** Misuse of the supervision API, such as two children with one name. */
export class SupervisorError extends Error {
  override name = "SupervisorError";
}
