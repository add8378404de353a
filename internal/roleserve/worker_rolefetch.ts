// The role-fetch worker: follows the cluster's node records through a
// curator's Watch, and publishes this node's roles and the set of curators
// (the directory other workers dial), and every node's record (the mesh's
// peers, internal/clusternet).

import { create, equals } from "@bufbuild/protobuf";
import { ClusterDirectorySchema, NodeRolesSchema, type ClusterDirectory, type NodeRoles } from "../../proto/gen/common/common_pb.ts";
import { directoryOf, formatEndpoint } from "../curator/client/mod.ts";
import { WatchEvent_Progress, type Node } from "../../proto/gen/curator/curator_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import type { Value } from "../event/mod.ts";
import { RestartRequest, type Runnable } from "../supervisor/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";

export interface RoleFetchOptions {
  membership: Value<ClusterMembership>;
  connection: Value<CuratorConnection>;
  /** Written: this node's roles. */
  roles: Value<NodeRoles | undefined>;
  /** Written: curators as the cluster reports them. */
  directory: Value<ClusterDirectory>;
  /** Written: every node's record, once the backlog is complete and at every change after (the mesh's peers). */
  nodes?: Value<readonly Node[]>;
}

export function roleFetchWorker(options: RoleFetchOptions): Runnable {
  return async (ctx) => {
    const { credentials } = await options.membership.get({ signal: ctx.signal });
    const connection = await options.connection.get({ signal: ctx.signal });
    const nodes = new Map<string, Node>();
    let lastRoles = "";
    ctx.logger.info("watching the cluster for this node's roles", { via: connection.endpoints[0] ? formatEndpoint(connection.endpoints[0]) : "none" });
    // A new set of curators (the local one started or stopped) means
    // watching through the best one again.
    const reconnect = options.connection
      .waitFor((c) => c !== connection, { signal: ctx.signal })
      .then(() => {
        throw new RestartRequest("the curators changed");
      });
    reconnect.catch(() => {});
    const watching = withCurator(connection, async (client) => {
      // Published once the backlog is complete: a directory from half a
      // backlog would tell the sealed and cold-start workers that members
      // left who did not.
      let backlogDone = false;
      for await (const event of client.watch({ kind: { case: "nodesInCluster", value: {} } }, { signal: ctx.signal })) {
        for (const node of event.nodes) nodes.set(node.id, node);
        for (const tombstone of event.nodeTombstones) nodes.delete(tombstone.nodeId);
        if (event.progress === WatchEvent_Progress.LAST_BACKLOGGED) backlogDone = true;
        if (!backlogDone) continue;
        const own = nodes.get(credentials.nodeId);
        const roles = own?.roles ?? create(NodeRolesSchema);
        const summary = JSON.stringify({
          consensus: Boolean(roles.consensusMember),
          controller: Boolean(roles.kubernetesController),
          worker: Boolean(roles.kubernetesWorker),
          peers: roles.consensusMember?.peers.length ?? 0,
        });
        if (summary !== lastRoles) {
          ctx.logger.info("roles", JSON.parse(summary));
          lastRoles = summary;
        }
        // Each only when it changed: most events are another node's record
        // (a label, a heartbeat's status), which leaves both as they were.
        const published = options.roles.peek();
        if (published === undefined || !equals(NodeRolesSchema, published, roles)) options.roles.set(roles);
        const directory = directoryOf([...nodes.values()]);
        const known = options.directory.peek();
        if (known === undefined || !equals(ClusterDirectorySchema, known, directory)) options.directory.set(directory);
        options.nodes?.set([...nodes.values()]);
        ctx.signalHealthy();
      }
    });
    await Promise.race([watching, reconnect]);
    throw new Error("the curator ended the watch");
  };
}
