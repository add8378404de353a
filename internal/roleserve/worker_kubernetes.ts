// The Kubernetes worker: runs what this node's Kubernetes roles need.
//
//  - kubernetes-worker: the container runtime (internal/containerd):
//    containerd, and the runtime probe, a real container kept running
//    while the node holds the role. Without the role, the runtime's cgroup
//    is emptied and the node says that no container process is left.
//  - Both roles: the Kubernetes server binaries are checked for and the
//    node says plainly whether they are there. Launching them is still to
//    come (issue 13); this worker does not pretend to.
//
// Board lines: "containerd" (not-assigned | unavailable | starting |
// running) and "kubernetes" (not-assigned | unavailable | not-started).

import { existsSync } from "node:fs";
import { join } from "node:path";
import type { NodeRoles } from "../../proto/gen/common/common_pb.ts";
import { containerdService, killCgroup, runtimeBinaries, runtimeProbe, type RuntimePaths } from "../containerd/mod.ts";
import { Value } from "../event/mod.ts";
import { RestartRequest, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { ServiceBoard } from "./service_status.ts";

/** Where the node image puts the Kubernetes binaries the user supplied. */
export const DEFAULT_KUBERNETES_BIN_DIR = "/kubernetes/bin";
export const CONTROLLER_BINARIES = ["kube-apiserver", "kube-controller-manager", "kube-scheduler"] as const;
export const WORKER_BINARIES = ["kubelet"] as const;

/** The container runtime's place on this node. */
export interface RuntimeSetup {
  paths: RuntimePaths;
  /** The probe's OCI image tarball. */
  probeImage: string;
  /** Makes the binaries available (on a VM: mounts the system image); throws, naming what is missing, if it cannot. */
  prepare?: () => void;
}

export interface KubernetesOptions {
  roles: Value<NodeRoles | undefined>;
  board: ServiceBoard;
  binDir?: string;
  /** Absent where the node cannot run containers (no cgroup v2): it says so when given the worker role. */
  runtime?: RuntimeSetup;
}

const wantsOf = (roles: NodeRoles | undefined) => ({ controller: Boolean(roles?.kubernetesController), worker: Boolean(roles?.kubernetesWorker) });

function reportBinaries(options: KubernetesOptions, wants: ReturnType<typeof wantsOf>, log: (message: string, missing: boolean) => void): void {
  const binDir = options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR;
  if (!wants.controller && !wants.worker) {
    options.board.report("kubernetes", "not-assigned", "this node has no Kubernetes role");
    return;
  }
  const needed = [...(wants.controller ? CONTROLLER_BINARIES : []), ...(wants.worker ? WORKER_BINARIES : [])];
  const missing = needed.filter((b) => !existsSync(join(binDir, b)));
  if (missing.length) {
    const message = `Kubernetes binaries not found in ${binDir} (missing: ${missing.join(", ")}); build the image with the Kubernetes server binaries to run them`;
    log(message, true);
    options.board.report("kubernetes", "unavailable", message);
  } else {
    const message = "Kubernetes binaries present; launching them is not implemented yet";
    log(message, false);
    options.board.report("kubernetes", "not-started", message);
  }
}

export function kubernetesWorker(options: KubernetesOptions): Runnable {
  return async (ctx) => {
    const roles = await options.roles.waitFor((r) => r !== undefined, { signal: ctx.signal });
    const wants = wantsOf(roles);
    reportBinaries(options, wants, (message, missing) => (missing ? ctx.logger.warn(message) : ctx.logger.info(message)));

    const runtime = options.runtime;
    if (!wants.worker) {
      // The children of an earlier run (the role was just taken away) are
      // stopped by now; whatever they left in the runtime's cgroup goes.
      if (runtime) {
        const killed = await killCgroup(runtime.paths.cgroup, ctx.signal);
        if (killed > 0) ctx.logger.info("stopped what the container runtime left running", { processes: killed, cgroup: runtime.paths.cgroup });
        options.board.report("containerd", "not-assigned", `no kubernetes-worker role; no container process left (${runtime.paths.cgroup} is empty)`);
      } else {
        options.board.report("containerd", "not-assigned", "no kubernetes-worker role");
      }
    } else if (!runtime) {
      const message = "this node cannot run containers: no cgroup v2 hierarchy is mounted";
      ctx.logger.warn(message);
      options.board.report("containerd", "unavailable", message);
    } else {
      let missing: string[];
      try {
        runtime.prepare?.();
        missing = [...Object.values(runtimeBinaries(runtime.paths.prefix)), runtime.probeImage].filter((file) => !existsSync(file));
      } catch (error) {
        missing = [(error as Error).message];
      }
      if (missing.length) {
        const message = `container runtime files missing: ${missing.join(", ")}`;
        ctx.logger.warn(message);
        options.board.report("containerd", "unavailable", message);
      } else {
        const ready = new Value<boolean>();
        ready.set(false);
        options.board.report("containerd", "starting", "waiting for containerd to answer");
        ctx.run("containerd", containerdService({ paths: runtime.paths, ready }));
        ctx.run(
          "probe",
          runtimeProbe({
            paths: runtime.paths,
            ready,
            image: runtime.probeImage,
            onRunning: () => options.board.report("containerd", "running", "containerd answers; the runtime probe container runs"),
          }),
        );
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
