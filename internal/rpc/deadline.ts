// Deadlines that judge a peer by what the peer did, not by how long this
// process was away.
//
// A server drops a connection whose client did not say its ClientHello,
// finish its handshake or make its first call in time (listener.ts). Such a
// deadline is a timer, and timers run before the event loop reads its
// sockets: when the process has not run for a while (a starved CPU under
// software emulation, a VM its host did not schedule, a long collection),
// the deadline fires late, before the bytes the peer sent long ago are
// read, and a client that did everything in time is dropped. On a node
// starting its apiserver under TCG that dropped the owner's calls three
// times in two CI runs ("the connection dropped during the call"); a
// process test blocks a server's loop past its deadlines to show it
// (listener.test.ts).
//
//   armed ─ms─▶ fired on time? ──yes──▶ the loop's next poll (setImmediate) ─▶ judge
//                    │ no: late by more than STALL_MS (the process was away)
//                    └──▶ armed again for as long as it was late (at most ms),
//                         while the whole wait stays under STALL_EXTENSION_LIMIT × ms
//
// Time is given back only where the caller says so: the listener gives it
// to known sources (addresses an owner's or a node's call was let in
// from) and, at the first-call deadline, to connections whose certificate
// the cluster CA issued (ListenLimits.vouch), never to strangers. Given
// to strangers, it let a flood hold its
// connections longer the slower it made the node, until the owner was
// locked out (the floods process test, on a loaded machine: every owner
// call refused, where without it the test passed in 44 s).
//
// Invariants:
//  - A peer is never judged less than `ms` after the deadline was armed.
//  - With giveBack, time the process did not run is given back to the
//    peer, once it is noticed, up to STALL_EXTENSION_LIMIT × ms in all: a
//    process that is away most of the time still judges, later.
//  - The judgement comes after a poll of the sockets, so what arrived
//    while the process was away is read first.

/** A timer later than this means the process was away, not merely busy. */
export const STALL_MS = 250;
/** The longest a deadline waits in all, as a multiple of its own length. */
export const STALL_EXTENSION_LIMIT = 4;

export interface PeerDeadline {
  /** The peer did what it had to: the judgement never runs. */
  clear(): void;
}

/**
 * Runs `judge` once `ms` have passed, after the loop's next poll; with
 * `giveBack`, once `ms` have passed in which this process could hear the
 * peer (see the file's essay).
 */
export function peerDeadline(ms: number, judge: () => void, giveBack: boolean): PeerDeadline {
  const armedAt = performance.now();
  let cleared = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const arm = (wait: number) => {
    const due = performance.now() + wait;
    timer = setTimeout(() => {
      const now = performance.now();
      const late = now - due;
      if (giveBack && late > STALL_MS && now - armedAt < STALL_EXTENSION_LIMIT * ms) {
        arm(Math.min(late, ms));
        return;
      }
      setImmediate(() => {
        if (!cleared) judge();
      });
    }, wait);
    timer.unref?.();
  };
  arm(ms);
  return {
    clear() {
      cleared = true;
      clearTimeout(timer);
    },
  };
}
