// Package clock: the node's wall clock as the node itself can judge it.
//
// A node cannot tell on its own whether its clock is right: the curator
// leader compares each heartbeat's time with its own (internal/curator's
// heartbeats.ts, CLOCK_SKEW). What a node can tell is that its wall clock
// moved differently from its monotonic clock: someone or something set it.
// jumps.ts watches for that and says so on the node's "clock" service line.
//
// What a node can do is keep its clock right: chrony.ts runs chronyd with
// the servers the DHCP lease (option 42) or the node parameters name, and
// reports the sync on the "time" service line; sync_gate.ts lets a boot wait
// for the first sync, for a while, before the node's first TLS handshake.
// A clock that cannot be synced is reported, never fatal.

export { CLOCK_LINE, JUMP_MS, LOOK_INTERVAL_MS, clockWatch, jumpBetween, type ClockLook } from "./jumps.ts";
export {
  CHRONYD_BINARY,
  MAX_TIME_SERVERS,
  STEP_THRESHOLD_S,
  STEP_UPDATES,
  SETTLE_MS,
  MAX_POLL,
  TIME_LINE,
  chronyConfig,
  chronyEvent,
  describeSync,
  nextSync,
  timeServerProblem,
  timeSyncRunnable,
  type ChronyEvent,
  type TimeSync,
  type TimeSyncOptions,
} from "./chrony.ts";
export { SYNC_GATE_MS, timeSyncGate, type GateResult } from "./sync_gate.ts";
export { loadTimeServers, saveTimeServers, timeServersProblem } from "./time_servers.ts";
