// The boot gate: before a node first speaks TLS to the cluster (whose
// curator certificates live an hour), it waits for its clock's first sync,
// for SYNC_GATE_MS at most, and then goes on, synced or not, saying so.

import type { Value } from "../event/mod.ts";
import type { TimeSync } from "./chrony.ts";

/** How long a boot waits for the first sync. */
export const SYNC_GATE_MS = 60_000;

export type GateResult = "synced" | "no-servers" | "timed-out";

/** Waits until the clock synced (or there is nothing to sync with), or `timeoutMs` ran out. */
export async function timeSyncGate(sync: Value<TimeSync>, options: { timeoutMs?: number; signal?: AbortSignal } = {}): Promise<GateResult> {
  const timeout = AbortSignal.timeout(options.timeoutMs ?? SYNC_GATE_MS);
  const signal = options.signal ? AbortSignal.any([options.signal, timeout]) : timeout;
  try {
    const settled = await sync.waitFor((s) => s.state === "synced" || s.state === "no-servers", { signal });
    return settled.state === "synced" ? "synced" : "no-servers";
  } catch (err) {
    if (options.signal?.aborted) throw err;
    return "timed-out";
  }
}
