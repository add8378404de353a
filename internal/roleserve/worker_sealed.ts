// The sealed-configuration worker: keeps what the node needs at its next
// boot current on the ESP — the curators to join through (so a rebooting
// node finds the survivors, not just the curators it knew when it enrolled),
// and, while the node is a consensus member, the cold-start key (README,
// "Cold start").

import { clone, create, equals } from "@bufbuild/protobuf";
import { SealedConfigurationSchema } from "../../proto/gen/api/configuration_pb.ts";
import { ClusterDirectorySchema, type ClusterDirectory, type NodeRoles } from "../../proto/gen/common/common_pb.ts";
import { readSealedConfiguration, writeSealedConfiguration, type ClusterMembership } from "../cluster/mod.ts";
import type { Value } from "../event/mod.ts";
import type { StorageLayout } from "../localstorage/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";

export interface SealedUpdateOptions {
  layout: StorageLayout;
  membership: Value<ClusterMembership>;
  roles: Value<NodeRoles | undefined>;
  directory: Value<ClusterDirectory>;
}

export function sealedUpdateWorker(options: SealedUpdateOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    using rolesWatcher = options.roles.watch();
    using directoryWatcher = options.directory.watch();
    type Change = { roles: NodeRoles | undefined } | { directory: ClusterDirectory };
    let nextRoles: Promise<Change> = rolesWatcher.get({ signal: ctx.signal }).then((roles) => ({ roles }));
    let nextDirectory: Promise<Change> = directoryWatcher.get({ signal: ctx.signal }).then((directory) => ({ directory }));
    let roles: NodeRoles | undefined;
    let directory: ClusterDirectory | undefined;
    ctx.signalHealthy();
    for (;;) {
      const change = await Promise.race([nextRoles, nextDirectory]);
      if ("roles" in change) {
        roles = change.roles;
        nextRoles = rolesWatcher.get({ signal: ctx.signal }).then((r) => ({ roles: r }));
      } else {
        directory = change.directory;
        nextDirectory = directoryWatcher.get({ signal: ctx.signal }).then((d) => ({ directory: d }));
      }
      if (roles === undefined) continue; // Until the cluster has spoken, keep what is there.
      const current = readSealedConfiguration(options.layout.esp.sealed);
      if (!current) continue;
      const next = clone(SealedConfigurationSchema, current);
      if (directory && directory.nodes.length > 0) next.clusterDirectory = create(ClusterDirectorySchema, directory);
      next.coldStartClusterUnlockKey = roles.consensusMember ? membership.clusterUnlockKey : new Uint8Array();
      if (equals(SealedConfigurationSchema, current, next)) continue;
      writeSealedConfiguration(options.layout.esp.sealed, next);
      ctx.logger.info("sealed configuration updated", {
        curators: next.clusterDirectory?.nodes.length ?? 0,
        coldStartKey: next.coldStartClusterUnlockKey.length > 0,
      });
    }
  };
}
