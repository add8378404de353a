// The node management runnable: serves NodeManagement on the node's address
// with the node's own certificate, once the node is part of a cluster.

import { NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import type { Value } from "../event/mod.ts";
import { addService, createServer, hostPort, listen, serverCredentials } from "../rpc/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { NODE_MANAGEMENT_PORT } from "./client.ts";
import { NODE_MANAGEMENT_POLICY, nodeManagementService, type NodeManagementDeps } from "./service.ts";

export interface NodeManagementOptions extends NodeManagementDeps {
  membership: Value<ClusterMembership>;
  port?: number;
}

export function nodeManagementRunnable(options: NodeManagementOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const { credentials } = membership;
    const server = createServer();
    addService(server, NodeManagement, nodeManagementService(options), {
      ca: () => credentials.ca,
      policy: NODE_MANAGEMENT_POLICY,
      onError: (method, err) => ctx.logger.debug("call failed", { method, error: String(err) }),
    });
    const address = hostPort(membership.address, options.port ?? NODE_MANAGEMENT_PORT);
    try {
      await listen(server, address, serverCredentials({ certificate: credentials.certificate, privateKey: credentials.privateKey }));
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${address}: ${(err as Error).message}`, { cause: err });
    }
    ctx.logger.info("node management serving", { address });
    ctx.signalHealthy();
    try {
      await untilCancelled(ctx.signal);
    } finally {
      server.forceShutdown();
    }
  };
}
