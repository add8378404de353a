// The status-push worker: tells the curator this node's address, whether it
// runs a curator, and how its services are doing, whenever that changes.

import { create, equals } from "@bufbuild/protobuf";
import { NodeStatusSchema, type NodeStatus, type ServiceStatus } from "../../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import type { Value } from "../event/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";
import { VERSION } from "../version/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";
import type { LocalCurator } from "./worker_controlplane.ts";

/** One push's deadline. */
export const STATUS_PUSH_TIMEOUT_MS = 10_000;

export interface StatusPushOptions {
  membership: Value<ClusterMembership>;
  connection: Value<CuratorConnection>;
  localCurator: Value<LocalCurator | undefined>;
  services: Value<ServiceStatus[]>;
}

export function statusPushWorker(options: StatusPushOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    using curatorWatcher = options.localCurator.watch();
    using servicesWatcher = options.services.watch();
    let local = options.localCurator.peek();
    let services = options.services.peek() ?? [];
    let pushed: NodeStatus | undefined;
    // One pending get per watcher, kept across rounds: a get that lost a
    // race must not swallow the update it later receives.
    type Change = { local: LocalCurator | undefined } | { services: ServiceStatus[] };
    const nextLocal = (): Promise<Change> => curatorWatcher.get({ signal: ctx.signal }).then((v) => ({ local: v }));
    const nextServices = (): Promise<Change> => servicesWatcher.get({ signal: ctx.signal }).then((v) => ({ services: v }));
    let pendingLocal = nextLocal();
    let pendingServices = nextServices();
    pendingLocal.catch(() => {});
    pendingServices.catch(() => {});
    ctx.signalHealthy();
    for (;;) {
      const status = create(NodeStatusSchema, {
        externalAddress: membership.address,
        ...(local ? { runningCurator: { port: local.port } } : {}),
        version: VERSION,
        services,
      });
      if (!pushed || !equals(NodeStatusSchema, pushed, status)) {
        const connection = await options.connection.get({ signal: ctx.signal });
        const stamped = create(NodeStatusSchema, { ...status, timestampMs: BigInt(Date.now()) });
        await withCurator(connection, (c) =>
          c.updateNodeStatus({ nodeId: membership.credentials.nodeId, status: stamped }, { timeoutMs: STATUS_PUSH_TIMEOUT_MS, signal: ctx.signal }),
        );
        ctx.logger.info("status pushed", { curator: Boolean(local), services: services.map((s) => `${s.name}=${s.state}`).join(",") });
        pushed = status;
      }
      // Wait for the next change of either input.
      const next = await Promise.race([pendingLocal, pendingServices]);
      if ("local" in next) {
        local = next.local;
        pendingLocal = nextLocal();
        pendingLocal.catch(() => {});
      } else {
        services = next.services;
        pendingServices = nextServices();
        pendingServices.catch(() => {});
      }
    }
  };
}
