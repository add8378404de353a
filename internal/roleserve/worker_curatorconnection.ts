// The curator-connection worker: keeps `connection`, the one way every other
// worker reaches the cluster's curators, current.
//
//   localCurator (controlplane) ─┐
//   directory (rolefetch) ───────┼─▶ endpoints: the local curator first, then
//                                │   every other consensus member's ─▶ connection
//   membership (credentials) ────┘   one CuratorPool of clients, kept across changes
//
// Reads: membership, localCurator, directory. Writes: directory (once, from
// the membership's, so that the first calls have somewhere to go) and
// connection (each time the endpoints change).

import { create } from "@bufbuild/protobuf";
import { ClusterDirectorySchema, type ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { CURATOR_PORT, CuratorPool, endpointsOfDirectory, formatEndpoint, sameAddress } from "../curator/client/mod.ts";
import { followValues, type Value } from "../event/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";
import type { CuratorConnection } from "./curator_connection.ts";
import type { LocalCurator } from "./worker_controlplane.ts";

export interface CuratorConnectionOptions {
  /** Read. */
  membership: Value<ClusterMembership>;
  /** Read: the curator on this node while it runs. */
  localCurator: Value<LocalCurator | undefined>;
  /** Read, and written once: the cluster's directory. */
  directory: Value<ClusterDirectory>;
  /** Written: the endpoints and the pool the other workers call through. */
  connection: Value<CuratorConnection>;
  curatorPort?: number | undefined;
}

export function curatorConnectionWorker(options: CuratorConnectionOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const { credentials } = membership;
    const port = options.curatorPort ?? CURATOR_PORT;
    options.directory.set(membership.directory ?? create(ClusterDirectorySchema));
    let local = options.localCurator.peek();
    let directory = options.directory.peek()!;
    let last = "";
    const pool = new CuratorPool({ ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.privateKey });
    ctx.signalHealthy();
    const publish = () => {
      const own = { host: membership.address, port };
      const remote = endpointsOfDirectory(directory, port).filter((e) => !sameAddress(e, own));
      const endpoints = local ? [local.endpoint, ...remote] : remote;
      const summary = endpoints.map(formatEndpoint).join(",");
      if (summary === last || endpoints.length === 0) return;
      ctx.logger.info("curators", { endpoints: summary });
      pool.retain(endpoints);
      options.connection.set({ endpoints, pool });
      last = summary;
    };
    try {
      publish();
      for await (const change of followValues({ local: options.localCurator, directory: options.directory }, ctx.signal)) {
        if (change.key === "local") local = change.value;
        else directory = change.value;
        publish();
      }
    } finally {
      pool.close();
    }
  };
}
