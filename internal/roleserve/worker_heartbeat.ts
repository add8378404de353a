// The heartbeat worker: keeps one Heartbeat stream open to the curator
// leader and sends an update every HEARTBEAT_INTERVAL_MS, so the leader can
// tell the owner which nodes are alive (internal/curator/heartbeats.ts).
//
//   connection (pool) ──▶ Heartbeat stream to the leader ──▶ update, answer, update, ...
//        ▲                        │ ends: leader changed (UNAVAILABLE + hint),
//        │                        │       connection lost (keepalive), no answer
//        └── retry after HEARTBEAT_RETRY_MS, never longer: a node that stays
//            silent for a supervisor backoff would be called timed out
//
// Reads: membership, connection. Writes: nothing (the leader keeps the state).

import type { ClusterMembership } from "../cluster/mod.ts";
import { HEARTBEAT_INTERVAL_MS, formatEndpoint } from "../curator/client/mod.ts";
import type { Value } from "../event/mod.ts";
import { peerDeadline, type PeerDeadline } from "../rpc/mod.ts";
import { sleep, type Runnable } from "../supervisor/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";

/** Without an answer for this many intervals, the stream is given up and opened again. */
const ANSWER_TIMEOUT_INTERVALS = 2;
/** How long to wait before opening a new stream after one failed. */
export const HEARTBEAT_RETRY_MS = 1_000;

export interface HeartbeatOptions {
  membership: Value<ClusterMembership>;
  connection: Value<CuratorConnection>;
  intervalMs?: number;
  /** Told of each answer from the leader (the node's metrics: the heartbeat's age). */
  answered?: () => void;
}

class NoAnswerError extends Error {
  override name = "NoAnswerError";
}

/** Yields an update at once, then one every interval, until the signal aborts; each says when it was sent (the leader tells the clock's offset). */
async function* updates(intervalMs: number, signal: AbortSignal): AsyncIterable<{ sentAtMs: bigint }> {
  for (;;) {
    yield { sentAtMs: BigInt(Date.now()) };
    try {
      await sleep(intervalMs, signal);
    } catch {
      return;
    }
  }
}

export function heartbeatWorker(options: HeartbeatOptions): Runnable {
  const intervalMs = options.intervalMs ?? HEARTBEAT_INTERVAL_MS;
  return async (ctx) => {
    await options.membership.get({ signal: ctx.signal });
    ctx.signalHealthy();
    let lastProblem = "";
    for (;;) {
      const connection = await options.connection.get({ signal: ctx.signal });
      const stream = new AbortController();
      const signal = AbortSignal.any([ctx.signal, stream.signal]);
      let watchdog: PeerDeadline | undefined;
      const answerTimeoutMs = intervalMs * ANSWER_TIMEOUT_INTERVALS;
      // Judged as a peer is (rpc's peerDeadline): after the loop has read
      // what arrived, and with the time this process did not run given
      // back, so that a starved node does not give up on an answer that
      // is waiting in its socket.
      const arm = () => {
        watchdog?.clear();
        watchdog = peerDeadline(answerTimeoutMs, () => stream.abort(new NoAnswerError(`no heartbeat answer within ${answerTimeoutMs} ms`)), true);
      };
      try {
        await withCurator(connection, async (client, endpoint) => {
          arm();
          let answers = 0;
          for await (const _answer of client.heartbeat(updates(intervalMs, signal), { signal })) {
            arm();
            options.answered?.();
            if (answers++ === 0) {
              ctx.logger.info("heartbeat stream open", { curator: formatEndpoint(endpoint) });
              lastProblem = "";
            }
          }
          throw new Error("the curator ended the heartbeat stream");
        });
      } catch (err) {
        if (ctx.signal.aborted) throw err;
        const problem = (err as Error).message;
        // Say it once per kind of trouble, not once a second.
        if (problem !== lastProblem) ctx.logger.warn("heartbeat stream failed; opening it again", { reason: problem, retryMs: HEARTBEAT_RETRY_MS });
        lastProblem = problem;
      } finally {
        watchdog?.clear();
        stream.abort();
      }
      await sleep(HEARTBEAT_RETRY_MS, ctx.signal);
    }
  };
}
