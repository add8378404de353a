// A doorbell on Kubernetes collections, for a loop that lists them and
// acts: instead of listing again every few seconds, the loop waits until
// one of them changes after the resourceVersion its last list returned,
// or until its longest wait is up, and then lists again.
//
//   list (resourceVersion R) ─▶ act ─▶ nextChange([{path, R}], maxWait)
//        ▲                                   │ a watch from R: the first event
//        └──────── "changed" / "quiet" ◀─────┘ (or the server's timeout, or a failure)
//
// Why: each worker's volume provisioner listed every claim and every
// PersistentVolume every 2 s, the largest steady load of ours on a TCG
// apiserver (docs/performance.md, "What node1's apiserver is asked"). A
// watch from a known resourceVersion costs the apiserver nothing while
// nothing changes, and tells at once when something does: an event that
// came between the list and the watch is replayed, since the watch
// starts at the list's version.
//
// The doorbell reads only the first bytes of one answer: it never parses
// events (the loop's next list says what changed), so its input is bounded
// whatever the apiserver sends. A watch the apiserver refuses, or one that
// fails, says "failed", and the loop falls back to its old pace.

import { privateKeyPem, toPem } from "../pki/mod.ts";
import type { ClientIdentity } from "./api_client.ts";

export interface WatchedCollection {
  /** The collection's path: `/api/v1/persistentvolumes`. */
  path: string;
  /** The resourceVersion of the list the loop acted on. */
  resourceVersion: string;
}

export type DoorbellAnswer = "changed" | "quiet" | "failed";

/**
 * Waits until one of `collections` changes after its resourceVersion
 * ("changed"), `maxWaitMs` passes with no change ("quiet"), or a watch
 * cannot be had ("failed": refused, a transport error, or a version too
 * old, which the apiserver tells as an event and so comes as "changed").
 */
export async function nextChange(server: string, identity: ClientIdentity, collections: readonly WatchedCollection[], maxWaitMs: number, signal: AbortSignal): Promise<DoorbellAnswer> {
  signal.throwIfAborted();
  // Without a version a watch starts with every object as if added: it would always ring.
  if (collections.length === 0 || collections.some((c) => c.resourceVersion === "")) return "failed";
  const tls = { ca: toPem(identity.ca), cert: toPem(identity.certificate), key: privateKeyPem(identity.privateKey) };
  const done = new AbortController();
  // The apiserver ends a watch at timeoutSeconds itself; ours is the backstop a few seconds later.
  const deadline = AbortSignal.timeout(maxWaitMs + 5_000);
  const stop = AbortSignal.any([signal, done.signal, deadline]);
  const timeoutSeconds = Math.max(1, Math.ceil(maxWaitMs / 1000));
  const one = async ({ path, resourceVersion }: WatchedCollection): Promise<DoorbellAnswer> => {
    const query = new URLSearchParams({ watch: "true", resourceVersion, timeoutSeconds: String(timeoutSeconds), allowWatchBookmarks: "false" });
    try {
      const response = await fetch(`${server}${path}?${query}`, { signal: stop, tls } as RequestInit);
      if (!response.ok || !response.body) {
        await response.body?.cancel().catch(() => {});
        return "failed";
      }
      const reader = response.body.getReader();
      for (;;) {
        const { done: ended, value } = await reader.read();
        if (ended) return "quiet";
        if (value.byteLength > 0) {
          await reader.cancel().catch(() => {});
          return "changed";
        }
      }
    } catch {
      if (signal.aborted) throw signal.reason;
      // Ended by our own backstop: the apiserver kept it open past its timeout, and nothing came.
      return deadline.aborted && !done.signal.aborted ? "quiet" : "failed";
    }
  };
  try {
    const answers = collections.map(one);
    // The first to say something decides; a quiet watch waits for the others.
    const spoken: Promise<DoorbellAnswer>[] = answers.map((a) => a.then((answer) => (answer === "quiet" ? new Promise<never>(() => {}) : answer)));
    const allQuiet: Promise<DoorbellAnswer> = Promise.all(answers).then((all) => all.find((a) => a !== "quiet") ?? "quiet");
    return await Promise.race([...spoken, allQuiet]);
  } finally {
    done.abort();
  }
}
