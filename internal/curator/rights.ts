// How long a node's right to its open streams lasts. A node certificate
// proves that the CA issued it, not that the node still belongs: a deleted
// node keeps its certificate. Every call of a node checks its record
// (admitMember), in every curator service; a stream is checked for as long
// as it is open (whenRightsEnd). The rpc
// adapter ends a node's Watch or Heartbeat as soon as its record goes or
// leaves UP, with the same refusal a new call would get.

import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { PermissionDeniedError, type Peer } from "../rpc/mod.ts";
import type { StateReader } from "./state_cache.ts";
import type { NodeWatchHub } from "./watch.ts";

/** Why a node may not call now: deleted, or not UP; undefined while it may. */
export function memberRefusal(nodeId: string, state: NodeState | undefined): PermissionDeniedError | undefined {
  if (state === undefined) return new PermissionDeniedError(`node ${nodeId} is not part of the cluster (it was deleted)`);
  if (state !== NodeState.UP) return new PermissionDeniedError(`node ${nodeId} is ${NodeState[state]}, not UP`);
  return undefined;
}

/** Admits a call: a node's only while its record exists and is UP (ServeOptions.admit). */
export async function admitMember(state: StateReader, peer: Peer, signal: AbortSignal): Promise<void> {
  if (peer.kind !== "node") return;
  const refusal = memberRefusal(peer.nodeId, (await state.read(signal)).node(peer.nodeId)?.state);
  if (refusal) throw refusal;
}

/**
 * Resolves, with the error its stream ends with, when `peer` (a node) loses
 * its right to the curator's streams; for other callers, and once `signal`
 * aborts, never resolves with anything that is used. A curator that loses
 * its watch of the records ends the stream as UNAVAILABLE: it can no
 * longer tell.
 */
export async function whenRightsEnd(watches: NodeWatchHub, peer: Peer, signal: AbortSignal): Promise<Error> {
  if (peer.kind !== "node") return new Promise<Error>(() => {});
  const id = peer.nodeId;
  try {
    for await (const event of watches.subscribe({ nodeId: id }, signal)) {
      const refusal =
        event.kind === "backlog"
          ? memberRefusal(id, event.nodes[0]?.state)
          : event.kind === "put"
            ? memberRefusal(id, event.node.state)
            : event.kind === "delete"
              ? memberRefusal(id, undefined)
              : undefined;
      if (refusal) return refusal;
    }
  } catch (err) {
    return err as Error;
  }
  return new Promise<Error>(() => {});
}
