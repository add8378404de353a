// How the node reaches the cluster's curators: the local one first when this
// node runs the control plane, then the consensus members of the directory.
// Calls move on to the next curator when one is unreachable, untrusted or
// not the leader (internal/curator/client does the dialling and checking).

import type { KeyObject, X509Certificate } from "node:crypto";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { callAnyCurator, type CuratorClientOf, type CuratorEndpoint } from "../curator/client/mod.ts";

export interface CuratorConnection {
  /** Curators, best first. */
  endpoints: CuratorEndpoint[];
  credentials: { ca: X509Certificate; certificate: X509Certificate; privateKey: KeyObject };
}

export type CuratorClient = CuratorClientOf<typeof Curator>;

/** Calls `call` with a client of each curator in turn until one succeeds (NoCuratorError if none does). */
export function withCurator<T>(connection: CuratorConnection, call: (client: CuratorClient) => Promise<T>): Promise<T> {
  return callAnyCurator(Curator, connection.endpoints, connection.credentials, call);
}
