// The status-push worker: tells the curator this node's address, whether it
// runs a curator, and how its services are doing, whenever that changes.

import { create, equals } from "@bufbuild/protobuf";
import { NodeStatusSchema, type NodeStatus, type ServiceStatus } from "../../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { followValues, type Value } from "../event/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";
import { KUBERNETES_VERSION, TEST_FAULT, VERSION } from "../version/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";
import { fitNodeStatus } from "../curator/mod.ts";
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
  /** Set to each status a curator accepted. */
  pushed?: Value<NodeStatus>;
  /** The node's system slots: which one runs, and the last update that did not take (a VM's; absent for a node process). */
  slots?: () => SlotStatus;
}

/** What a node says about its slots in its status. */
export interface SlotStatus {
  slot: string;
  failure?: { version: string; reason: string; timeMs: number } | undefined;
}

export function statusPushWorker(options: StatusPushOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    let local = options.localCurator.peek();
    let services = options.services.peek() ?? [];
    let pushed: NodeStatus | undefined;
    const pushIfChanged = async () => {
      const slots = options.slots?.();
      // Cut to what the curator accepts: a service's long message (a
      // component's error) would otherwise get the whole status refused.
      const status = fitNodeStatus(
        create(NodeStatusSchema, {
          externalAddress: membership.address,
          ...(local ? { runningCurator: { port: local.endpoint.port } } : {}),
          version: VERSION,
          kubernetesVersion: KUBERNETES_VERSION,
          bootMs: BigInt(options.bootMs),
          services,
          ...(slots ? { slot: slots.slot } : {}),
          ...(slots?.failure ? { updateFailure: { version: slots.failure.version, reason: slots.failure.reason, timeMs: BigInt(slots.failure.timeMs) } } : {}),
        }),
      );
      if (pushed && equals(NodeStatusSchema, pushed, status)) return;
      if (TEST_FAULT === "no-rejoin") throw new Error(`this build carries the test fault ${TEST_FAULT}: it never reports its status`);
      const connection = await options.connection.get({ signal: ctx.signal });
      const stamped = create(NodeStatusSchema, { ...status, timestampMs: BigInt(Date.now()) });
      await withCurator(connection, (c) => c.updateNodeStatus({ nodeId: membership.credentials.nodeId, status: stamped }, { timeoutMs: STATUS_PUSH_TIMEOUT_MS, signal: ctx.signal }));
      ctx.logger.info("status pushed", { curator: Boolean(local), services: services.map((s) => `${s.name}=${s.state}`).join(",") });
      pushed = status;
      options.pushed?.set(stamped);
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
