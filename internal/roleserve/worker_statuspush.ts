// The status-push worker: tells the curator this node's address, whether it
// runs a curator, and how its services are doing, whenever that changes.

import { create, equals } from "@bufbuild/protobuf";
import { NodeStatusSchema, type NodeStatus, type ServiceStatus } from "../../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { followValues, type Value } from "../event/mod.ts";
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
  /** When this boot of the node began (ms since the epoch). */
  bootMs: number;
}

export function statusPushWorker(options: StatusPushOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    let local = options.localCurator.peek();
    let services = options.services.peek() ?? [];
    let pushed: NodeStatus | undefined;
    const pushIfChanged = async () => {
      const status = create(NodeStatusSchema, {
        externalAddress: membership.address,
        ...(local ? { runningCurator: { port: local.endpoint.port } } : {}),
        version: VERSION,
        bootMs: BigInt(options.bootMs),
        services,
      });
      if (pushed && equals(NodeStatusSchema, pushed, status)) return;
      const connection = await options.connection.get({ signal: ctx.signal });
      const stamped = create(NodeStatusSchema, { ...status, timestampMs: BigInt(Date.now()) });
      await withCurator(connection, (c) =>
        c.updateNodeStatus({ nodeId: membership.credentials.nodeId, status: stamped }, { timeoutMs: STATUS_PUSH_TIMEOUT_MS, signal: ctx.signal }),
      );
      ctx.logger.info("status pushed", { curator: Boolean(local), services: services.map((s) => `${s.name}=${s.state}`).join(",") });
      pushed = status;
    };
    ctx.signalHealthy();
    await pushIfChanged();
    for await (const change of followValues({ local: options.localCurator, services: options.services }, ctx.signal)) {
      if (change.key === "local") local = change.value;
      else services = change.value;
      await pushIfChanged();
    }
  };
}
