// The share holder runnable: serves ShareHolder on the node's address from
// boot on, before the node's own data is unlocked, as soon as the node's
// sealed configuration holds a join certificate (consensus members get one
// from the curator; see worker_coldstart in roleserve).

import type { SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import { ShareHolder } from "../../proto/gen/coldstart/coldstart_pb.ts";
import type { ClusterDirectory } from "../../proto/gen/common/common_pb.ts";
import { create } from "@bufbuild/protobuf";
import { ClusterDirectorySchema } from "../../proto/gen/common/common_pb.ts";
import { X509Certificate } from "node:crypto";
import type { Value } from "../event/mod.ts";
import { readSealedConfiguration, type StorageLayout } from "../localstorage/mod.ts";
import { commonNameOf, privateKeyFromRaw } from "../pki/mod.ts";
import { addService, createServer, hostPort, listen, serverCredentials } from "../rpc/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { shareHolderService, SHARE_HOLDER_POLICY } from "./service.ts";

/** The port every consensus member serves ShareHolder on (curator 7835, node management 7836). */
export const SHARE_HOLDER_PORT = 7837;

export interface ShareHolderOptions {
  layout: StorageLayout;
  address: (signal: AbortSignal) => Promise<string>;
  /** The sealed configuration each time the node rewrites it (the role server does). */
  sealed: Value<SealedConfiguration>;
  /** The consensus members as the cluster reports them, once the node is part of it. */
  directory: Value<ClusterDirectory>;
  port?: number;
}

export function shareHolderRunnable(options: ShareHolderOptions): Runnable {
  return async (ctx) => {
    const address = await options.address(ctx.signal);
    ctx.signalHealthy();
    let sealed = options.sealed.peek() ?? readSealedConfiguration(options.layout.esp.sealed);
    if (!sealed || sealed.joinCertificate.length === 0) {
      ctx.logger.debug("no join certificate yet; not holding shares");
      sealed = await options.sealed.waitFor((s) => s.joinCertificate.length > 0, { signal: ctx.signal });
    }
    const joinCertificate = new X509Certificate(sealed.joinCertificate);
    const nodeId = commonNameOf(joinCertificate) ?? "";
    const current = () => options.sealed.peek() ?? sealed;
    const ca = () => new X509Certificate(current().clusterCa);
    const server = createServer();
    addService(
      server,
      ShareHolder,
      shareHolderService({
        nodeId,
        heldPath: options.layout.esp.heldShares,
        espPath: options.layout.esp.path,
        sealed: current,
        // Live while the node is part of the cluster; before that, what the ESP remembers.
        directory: () => options.directory.peek() ?? current().clusterDirectory ?? create(ClusterDirectorySchema),
        logger: ctx.logger,
      }),
      { ca, policy: SHARE_HOLDER_POLICY, onError: (method, err) => ctx.logger.info("share call refused", { method, error: (err as Error).message }) },
    );
    const where = hostPort(address, options.port ?? SHARE_HOLDER_PORT);
    try {
      await listen(server, where, serverCredentials({ certificate: joinCertificate, privateKey: privateKeyFromRaw(sealed.joinKey) }));
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${where}: ${(err as Error).message}`, { cause: err });
    }
    ctx.logger.info("holding cold-start shares", { address: where, node: nodeId });
    try {
      await untilCancelled(ctx.signal);
    } finally {
      server.forceShutdown();
    }
  };
}
