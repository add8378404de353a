// Which runnables of a tree are failing, read from its dump: the node's
// "supervision" line, which the cluster folds into the node's health.
//
// A runnable fails when it is stuck (it would not stop), or when it died
// and has not been healthy since: then its backoff has grown past the
// first interval. A planned restart (RestartRequest from a healthy
// runnable) is immediate and leaves the backoff alone, so a node that just
// got a role is not failing; a crash-looping etcd is.

import { BACKOFF_INITIAL_MS } from "./backoff.ts";
import type { RunnableDump } from "./supervisor.ts";

/** The runnables of `dump` that are failing, deepest paths first (the cause before its parents). */
export function failingRunnables(dump: readonly RunnableDump[], initialBackoffMs = BACKOFF_INITIAL_MS): RunnableDump[] {
  return dump
    .filter((d) => d.state === "stuck" || ((d.state === "dead" || d.state === "starting") && d.backoffMs > initialBackoffMs))
    .sort((a, b) => b.path.split(".").length - a.path.split(".").length || a.path.localeCompare(b.path));
}

/** How many failing runnables one line names. */
const NAMED = 3;

/** One line about the failing runnables: what each is, how often it restarted, and its last error. */
export function failingSummary(failing: readonly RunnableDump[]): string {
  const named = failing.slice(0, NAMED).map((d) => `${d.path} ${d.state === "stuck" ? "is stuck" : `keeps failing (${d.restarts} restarts${d.lastError ? `; last: ${d.lastError}` : ""})`}`);
  return `${named.join("; ")}${failing.length > NAMED ? `; and ${failing.length - NAMED} more` : ""}`;
}
