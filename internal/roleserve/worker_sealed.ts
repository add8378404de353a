// The sealed-configuration worker: keeps what the node needs at its next
// boot current on the ESP — the curators to join through (so a rebooting
// node finds the survivors, not just the curators it knew when it enrolled),
// and, while the node is a consensus member whose cluster half is not split
// among other members yet, the cold-start key (README, "Cold start"; the
// cold-start worker makes the split and erases the key).

import { create, equals } from "@bufbuild/protobuf";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import { ClusterDirectorySchema, type ClusterDirectory, type NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { followValues, type Value } from "../event/mod.ts";
import { updateSealedConfiguration, type StorageLayout } from "../localstorage/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";

export interface SealedUpdateOptions {
  layout: StorageLayout;
  membership: Value<ClusterMembership>;
  roles: Value<NodeRoles | undefined>;
  directory: Value<ClusterDirectory>;
  /** Written: every sealed configuration this worker writes. */
  sealed: Value<SealedConfiguration>;
  /** Overwrites the ESP's free space, where a replaced file's old contents stay (VMs only). */
  scrubEsp?: () => Promise<void>;
}

export function sealedUpdateWorker(options: SealedUpdateOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    let roles: NodeRoles | undefined;
    let directory: ClusterDirectory | undefined;
    ctx.signalHealthy();
    for await (const change of followValues({ roles: options.roles, directory: options.directory }, ctx.signal)) {
      if (change.key === "roles") roles = change.value;
      else directory = change.value;
      if (roles === undefined) continue; // Until the cluster has spoken, keep what is there.
      const seen = { roles, directory };
      const updated = await updateSealedConfiguration(options.layout.esp, options.sealed, (next) => {
        if (seen.directory && seen.directory.nodes.length > 0) next.clusterDirectory = create(ClusterDirectorySchema, seen.directory);
        const split = (next.unlockShares?.holders.length ?? 0) > 0;
        next.coldStartClusterUnlockKey = seen.roles.consensusMember && !split ? membership.clusterUnlockKey : new Uint8Array();
      });
      if (!updated || equals(SealedConfigurationSchema, updated.previous, updated.next)) continue;
      const { previous: current, next } = updated;
      if (current.coldStartClusterUnlockKey.length > 0 && next.coldStartClusterUnlockKey.length === 0 && options.scrubEsp) {
        await options.scrubEsp();
        ctx.logger.info("the cold-start key left the ESP; its free space is overwritten");
      }
      ctx.logger.info("sealed configuration updated", {
        curators: next.clusterDirectory?.nodes.length ?? 0,
        coldStartKey: next.coldStartClusterUnlockKey.length > 0,
      });
    }
  };
}
