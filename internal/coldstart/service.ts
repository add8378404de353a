// The ShareHolder service: keeps the other consensus members' shares, and
// hands each member its own shares back when it cold-starts.

import { fromBinary } from "@bufbuild/protobuf";
import type { SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import { WrappedShareSchema, type ShareHolder } from "../../proto/gen/coldstart/coldstart_pb.ts";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import type { Logger } from "../log/mod.ts";
import { nodeIdFromPublicKey, NODE_ID_PATTERN } from "../pki/mod.ts";
import { exclusively } from "../localstorage/mod.ts";
import { InvalidArgumentError, NotFoundError, PermissionDeniedError, quote, type ServiceImpl, type ServicePolicy } from "../rpc/mod.ts";
import { dropShares, holdShare, sharesHeldFor } from "./held_shares.ts";
import { MAX_SEALED_SHARE_BYTES, ShareError, openAsHolder } from "./shares.ts";

export const SHARE_HOLDER_POLICY: ServicePolicy<typeof ShareHolder> = {
  holdShare: "node",
  // A cold-starting node has only its join certificate.
  getShares: "join",
  releaseShares: "node",
};

export interface ShareHolderDeps {
  /** This node's ID (its join certificate names it). */
  nodeId: string;
  /** The held shares file on the ESP. */
  heldPath: string;
  /** The ESP's mount point: writes there take its lock (localstorage exclusively), as its scrub does. */
  espPath: string;
  /** The node's sealed configuration as it is now: the cluster CA and the join key. */
  sealed: () => SealedConfiguration;
  /** The consensus members as the cluster last reported them. */
  directory: () => ClusterDirectory;
  logger: Logger;
}

export function isConsensusMember(directory: ClusterDirectory, nodeId: string): boolean {
  return directory.nodes.some((n) => nodeIdFromPublicKey(n.publicKey) === nodeId);
}

export function shareHolderService(deps: ShareHolderDeps): ServiceImpl<typeof ShareHolder> {
  return {
    async holdShare(request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      const owner = ctx.peer.nodeId;
      if (owner === deps.nodeId) throw new InvalidArgumentError("a node does not hold a share of its own key");
      if (!isConsensusMember(deps.directory(), owner)) {
        throw new PermissionDeniedError(`node ${owner} is not a consensus member in this node's directory; only consensus members leave shares here`);
      }
      if (request.epoch < 1n) throw new InvalidArgumentError("epoch: must be at least 1");
      if (request.committedEpoch > request.epoch) throw new InvalidArgumentError(`committed_epoch ${request.committedEpoch} is after epoch ${request.epoch}`);
      if (request.sealedShare.length === 0 || request.sealedShare.length > MAX_SEALED_SHARE_BYTES) {
        throw new InvalidArgumentError(`sealed_share: ${request.sealedShare.length} bytes, must be 1 to ${MAX_SEALED_SHARE_BYTES}`);
      }
      // A share this node could not open later is refused now, not kept.
      try {
        openAsHolder(deps.sealed().joinKey, owner, deps.nodeId, request.sealedShare);
      } catch (err) {
        if (err instanceof ShareError) throw new InvalidArgumentError(`sealed_share: not sealed to this node's join key: ${err.message}`);
        throw err;
      }
      await exclusively(deps.espPath, () => holdShare(deps.heldPath, { owner, epoch: request.epoch, committedEpoch: request.committedEpoch, sealedShare: request.sealedShare }));
      deps.logger.info("holding a cold-start share", { owner, epoch: String(request.epoch), committed: String(request.committedEpoch) });
      return {};
    },

    async releaseShares(_request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      const owner = ctx.peer.nodeId;
      const dropped = await exclusively(deps.espPath, () => dropShares(deps.heldPath, (o) => o !== owner));
      if (dropped.length) deps.logger.info("dropped the cold-start shares of a node whose split left this node out", { owner });
      return {};
    },

    async getShares(request, ctx) {
      // The caller is known before any field is read: the join policy let
      // only a join certificate under the cluster CA through, and it names the node.
      if (ctx.peer.kind !== "join") throw new Error("unreachable: policy is join");
      if (!NODE_ID_PATTERN.test(request.nodeId)) throw new InvalidArgumentError(`node_id: ${quote(request.nodeId, 40)} is not a node ID (node- and 16 hex digits)`);
      if (request.nodeId !== ctx.peer.nodeId) throw new PermissionDeniedError(`this is node ${ctx.peer.nodeId}'s join certificate, not node ${request.nodeId}'s`);
      const held = sharesHeldFor(deps.heldPath, request.nodeId);
      if (held.length === 0) throw new NotFoundError(`this node (${deps.nodeId}) holds no share for ${request.nodeId}`);
      const joinSeed = deps.sealed().joinKey;
      const shares = held.map((s) => fromBinary(WrappedShareSchema, openAsHolder(joinSeed, request.nodeId, deps.nodeId, s.sealedShare)));
      deps.logger.info("handed out cold-start shares", { to: request.nodeId, shares: shares.length });
      return { shares };
    },
  };
}
