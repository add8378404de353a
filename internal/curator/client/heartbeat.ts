// The heartbeat contract between nodes and the curator leader: how often a
// node speaks, and how long the leader waits before it calls a node timed
// out. Both sides read these from here, so they cannot drift apart.

/** How often a node sends a heartbeat update. */
export const HEARTBEAT_INTERVAL_MS = 5_000;
/**
 * How long the leader waits for a heartbeat before it calls the node timed
 * out: two missed beats and some slack. A node that powers off shows as
 * timed out at most one interval plus this later (17 s).
 */
export const HEARTBEAT_TIMEOUT_MS = 12_000;
