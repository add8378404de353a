// Package supervisor: the Erlang-style supervision tree every long-running
// part of the node runs in, after Monogon's supervisor.
//
// A runnable is an async function that takes a RunContext. It starts
// children (single, or as a group that lives and dies together), says when it
// is healthy, and runs until its signal aborts.
//
//                    root                        (cmd/init's root runnable)
//                  /      \
//          network          roleserve
//                          /    |     \
//               controlplane  kubernetes  statuspush
//                 /     \
//              etcd ═ consensus            ← a group (═): etcd runs the member
//                   /    |     \             through the process runner; its
//            curator  upkeep  memberstatus   death restarts both, never the
//                                            control plane above them
//
//   death of X (returned/threw before cancel)
//      │
//      ├─ cancel X's children (recursively) and X's group siblings
//      ├─ wait for them to return (grace period; laggards reported "stuck")
//      ├─ wait backoff: 0.5 s, ×1.5 per death, ±50 % jitter, 60 s cap;
//      │   reset once X signals healthy (a RestartRequest from a healthy
//      │   runnable restarts at once)
//      └─ start X and its siblings again — X's parent never notices
//
// Invariants:
//  - A death never kills the parent; only the dead runnable's group restarts.
//  - A runnable that signalled done and returned is not restarted; its
//    children keep running.
//  - Cancellation flows down: a cancelled runnable's children are cancelled
//    first-class (their signals abort), and the tree waits for them.
//  - Every runnable's logger is named by its dotted path.
//  - Child processes run only through the process runner: output is logged
//    line by line, cancellation sends SIGTERM then SIGKILL, and the exit is
//    always awaited; an exit on its own is a death.

export { supervise, sleep, untilCancelled, Supervisor, DEFAULT_STOP_GRACE_MS, type Runnable, type RunContext, type RunnableDump, type RunnableState, type SupervisorOptions } from "./supervisor.ts";
export { Backoff, DEFAULT_BACKOFF, type BackoffPolicy } from "./backoff.ts";
export { failingRunnables, failingSummary } from "./failing.ts";
export { RestartRequest, SupervisorError } from "./errors.ts";
export {
  runProcess,
  runCommand,
  isSpawnedChild,
  spawnChild,
  processRunnable,
  CommandError,
  type CommandOptions,
  type CommandResult,
  ProcessExitError,
  ProcessStartError,
  PROCESS_OUTPUT_NAME,
  DEFAULT_KILL_GRACE_MS,
  DEFAULT_HEALTHY_AFTER_MS,
  type ProcessOptions,
  type ParsedLine,
} from "./process_runner.ts";
