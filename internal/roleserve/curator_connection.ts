// How the node reaches the cluster's curators: the local one first when this
// node runs the control plane, then the consensus members of the directory,
// through one pool of clients that calls the leader first once it knows it.
// Calls move on to the next curator when one is unreachable, untrusted or
// not the leader (internal/curator/client does the dialling and checking).

import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { CuratorPool, type CuratorClientOf, type CuratorEndpoint } from "../curator/client/mod.ts";

export interface CuratorConnection {
  /** Curators, best first (the pool puts the leader before them once known). */
  endpoints: CuratorEndpoint[];
  /** Clients with this node's credentials, shared by the workers. */
  pool: CuratorPool;
}

export type CuratorClient = CuratorClientOf<typeof Curator>;

/** Calls `call` with a client of each curator in turn until one succeeds (NoCuratorError if none does). */
export function withCurator<T>(connection: CuratorConnection, call: (client: CuratorClient, endpoint: CuratorEndpoint) => Promise<T>): Promise<T> {
  return connection.pool.call(Curator, connection.endpoints, call);
}
