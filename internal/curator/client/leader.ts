// The leader hint: a curator that is not the leader refuses writes with
// UNAVAILABLE and names the leader, as it sees it, in a trailer
// ("nodecore-leader: node-…@host:port"). Clients go there next and call it
// first from then on (pool.ts). A hint only says where to dial: the server
// there must still prove it is that curator (identity.ts).

import { RpcError, Status } from "../../rpc/mod.ts";
import { formatEndpoint, parseEndpoint, type CuratorEndpoint } from "./endpoint.ts";

export const LEADER_TRAILER = "nodecore-leader";
/**
 * Sent instead when no curator leads yet (a new cluster's first seconds, a
 * failover): an election is under way, and the call was refused before
 * anything was done, so it may be asked again (pool.ts waits it out).
 */
export const ELECTION_TRAILER = "nodecore-election";

/** The trailer of a refusal while no curator leads. */
export function electionTrailer(): Record<string, string> {
  return { [ELECTION_TRAILER]: "under-way" };
}

/** Whether an answer says that no curator leads yet. */
export function electionUnderWay(err: unknown): boolean {
  return err instanceof RpcError && err.code === Status.UNAVAILABLE && err.trailers[ELECTION_TRAILER] !== undefined;
}

/** The trailer a follower sends with its refusal. */
export function leaderTrailer(leader: CuratorEndpoint): Record<string, string> {
  return { [LEADER_TRAILER]: formatEndpoint(leader) };
}

/** The leader an UNAVAILABLE answer names, if it names one that parses (with a node ID). */
export function leaderHintOf(err: unknown): CuratorEndpoint | undefined {
  if (!(err instanceof RpcError) || err.code !== Status.UNAVAILABLE) return undefined;
  const text = err.trailers[LEADER_TRAILER];
  if (!text) return undefined;
  try {
    const endpoint = parseEndpoint(text);
    return endpoint.nodeId ? endpoint : undefined;
  } catch {
    return undefined;
  }
}
