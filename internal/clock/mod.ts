// Package clock: the node's wall clock as the node itself can judge it.
//
// A node cannot tell on its own whether its clock is right: the curator
// leader compares each heartbeat's time with its own (internal/curator's
// heartbeats.ts, CLOCK_SKEW). What a node can tell is that its wall clock
// moved differently from its monotonic clock: someone or something set it.
// jumps.ts watches for that and says so on the node's "clock" service line.

export { CLOCK_LINE, JUMP_MS, LOOK_INTERVAL_MS, clockWatch, jumpBetween, type ClockLook } from "./jumps.ts";
