// Events on PersistentVolumeClaims, where `kubectl describe pvc` shows
// them: what the provisioner (on a worker) and the volumes controller (on
// a controller) tell the claim's owner. One reason on one claim is said at
// most once a minute, and the memory of what was said forgets what may be
// said again, so it stays as small as the claims in trouble.

import type { CoreV1Api, V1PersistentVolumeClaim } from "@kubernetes/client-node";
import type { Logger } from "../log/mod.ts";

/** An event about the same claim and reason is not repeated sooner. */
export const EVENT_REPEAT_MS = 60_000;

export type ClaimEventType = "Normal" | "Warning";
export type ClaimEvent = (claim: V1PersistentVolumeClaim, type: ClaimEventType, reason: string, message: string) => Promise<void>;

/** Records events as `component` (on `host`, if one node says it); a failure to record is logged at debug and dropped. */
export function claimEvents(core: CoreV1Api, source: { component: string; host?: string }, logger: Logger): ClaimEvent {
  const said = new Map<string, number>();
  return async (claim, type, reason, message) => {
    const key = `${claim.metadata?.uid}/${reason}`;
    if ((said.get(key) ?? 0) > Date.now()) return;
    for (const [known, until] of said) if (until <= Date.now()) said.delete(known);
    said.set(key, Date.now() + EVENT_REPEAT_MS);
    const now = new Date();
    const namespace = claim.metadata!.namespace!;
    await core
      .createNamespacedEvent({
        namespace,
        body: {
          metadata: { generateName: `${claim.metadata!.name}.`, namespace },
          involvedObject: { kind: "PersistentVolumeClaim", apiVersion: "v1", namespace, name: claim.metadata!.name!, uid: claim.metadata!.uid! },
          type,
          reason,
          // Bounded as the apiserver bounds it (1 KiB for a note).
          message: message.slice(0, 1024),
          source,
          firstTimestamp: now,
          lastTimestamp: now,
          count: 1,
        },
      })
      .catch((error: unknown) => logger.debug("could not record an event", { reason, error: (error as Error).message }));
  };
}
