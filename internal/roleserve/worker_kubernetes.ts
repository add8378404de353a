// The Kubernetes worker: when this node holds a Kubernetes role, it checks
// that the Kubernetes server binaries are there and says plainly in the
// node's status whether they can run. Launching them is a later issue; this
// worker does not pretend to.

import { existsSync } from "node:fs";
import { join } from "node:path";
import type { NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { Value } from "../event/mod.ts";
import { RestartRequest, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { ServiceBoard } from "./service_status.ts";

/** Where the node image puts the Kubernetes binaries the user supplied. */
export const DEFAULT_KUBERNETES_BIN_DIR = "/kubernetes/bin";
export const CONTROLLER_BINARIES = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"] as const;
export const WORKER_BINARIES = ["kubelet"] as const;

export interface KubernetesOptions {
  roles: Value<NodeRoles | undefined>;
  board: ServiceBoard;
  binDir?: string;
}

const wantsOf = (roles: NodeRoles | undefined) => ({ controller: Boolean(roles?.kubernetesController), worker: Boolean(roles?.kubernetesWorker) });

export function kubernetesWorker(options: KubernetesOptions): Runnable {
  return async (ctx) => {
    const binDir = options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR;
    const roles = await options.roles.waitFor((r) => r !== undefined, { signal: ctx.signal });
    const wants = wantsOf(roles);
    if (!wants.controller && !wants.worker) {
      options.board.report("kubernetes", "not-assigned", "this node has no Kubernetes role");
    } else {
      const needed = [...(wants.controller ? CONTROLLER_BINARIES : []), ...(wants.worker ? WORKER_BINARIES : [])];
      const missing = needed.filter((b) => !existsSync(join(binDir, b)));
      if (missing.length) {
        const message = `Kubernetes binaries not found in ${binDir} (missing: ${missing.join(", ")}); build the image with the Kubernetes server binaries to run them`;
        ctx.logger.warn(message);
        options.board.report("kubernetes", "unavailable", message);
      } else {
        const message = "Kubernetes binaries present; launching them is not implemented yet";
        ctx.logger.info(message);
        options.board.report("kubernetes", "not-started", message);
      }
    }
    ctx.signalHealthy();
    // A change of the Kubernetes roles means deciding again.
    await Promise.race([
      untilCancelled(ctx.signal),
      options.roles.waitFor((r) => JSON.stringify(wantsOf(r)) !== JSON.stringify(wants), { signal: ctx.signal }).then(() => {
        throw new RestartRequest("Kubernetes roles changed");
      }),
    ]);
  };
}
