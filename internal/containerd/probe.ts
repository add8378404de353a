// The runtime probe: a real container that a Kubernetes worker node keeps
// running while it holds the role, made from the busybox image the image
// build puts in the node (image/oci.ts). It proves, on the node itself, that
// containerd pulls from its content store, unpacks a snapshot, and runc
// starts a process in its own PID namespace, root and cgroup. Its output
// goes to the node's log as it comes:
//
//   runtime probe: pid 1, root overlay, cgroup 0::/nodecore-runtime/containers/runtime-probe
//
// It runs as `ctr run --rm` under the process runner: ctr stays attached
// and its output is the container's. If the container ends, ctr removes it
// and exits, which is a death the supervisor restarts. When the role goes,
// ctr is stopped and the container, still running under its shim, is
// killed with the runtime's cgroup (the Kubernetes worker does that); a
// container left by an earlier run is removed before the next one starts.

import { existsSync } from "node:fs";
import type { Value } from "../event/mod.ts";
import { runProcess, sleep, type Runnable } from "../supervisor/mod.ts";
import { runtimeEnv, type RuntimePaths } from "./config.ts";
import { ctr, ctrArgv } from "./service.ts";

/** The probe container's id in containerd. */
export const PROBE_CONTAINER_ID = "runtime-probe";
/** The reference the image build tags the probe image with (image/oci.ts's PROBE_IMAGE_REF). */
export const PROBE_IMAGE_REF = "nodecore.local/runtime-probe:busybox";
/** Where the system image puts the probe image (below its mount point). */
export const PROBE_IMAGE_PATH = "/usr/share/nodecore/images/runtime-probe.oci.tar";

/** What the container runs: say where it is, then stay. */
export const PROBE_SCRIPT = [
  // PID 1 ignores signals it has no handler for, and ctr passes its SIGTERM
  // on to the container: without the trap, stopping the probe waited out
  // the runner's kill grace (5 s) every time.
  "trap 'exit 0' TERM",
  "root=$(awk '$5==\"/\"{print $9}' /proc/self/mountinfo)",
  // The unified hierarchy's line only (a hybrid host lists v1 ones too).
  'echo "runtime probe: pid $$, root $root, cgroup $(grep ^0:: /proc/self/cgroup)"',
  // A wait the trap interrupts at once, where a sleep would finish first.
  "while :; do sleep 1 & wait $!; done",
].join("; ");

const RUNNING_POLL_MS = 250;
/** How long ctr gets to end after SIGTERM before it is killed. */
const PROBE_KILL_GRACE_MS = 1_000;

export interface ProbeOptions {
  paths: RuntimePaths;
  /** Read: containerd answers. */
  ready: Value<boolean>;
  /** The OCI layout tarball to import. */
  image: string;
  /** Told once the container runs. */
  onRunning?: () => void;
}

/** Whether ctr lists the probe's task as RUNNING. */
async function probeRunning(paths: RuntimePaths, signal: AbortSignal): Promise<boolean> {
  const listing = await ctr(paths, ["tasks", "ls"], signal);
  return listing.split("\n").some((line) => line.split(/\s+/)[0] === PROBE_CONTAINER_ID && /\bRUNNING\b/.test(line));
}

/** Removes a probe container an earlier run left (a crash, a stopped containerd); absent is fine. */
async function removeLeftover(paths: RuntimePaths, signal: AbortSignal): Promise<boolean> {
  const containers = await ctr(paths, ["containers", "ls", "--quiet"], signal);
  if (!containers.split("\n").includes(PROBE_CONTAINER_ID)) return false;
  await ctr(paths, ["tasks", "kill", "--signal", "SIGKILL", PROBE_CONTAINER_ID], signal).catch(() => {});
  await ctr(paths, ["tasks", "delete", "--force", PROBE_CONTAINER_ID], signal).catch(() => {});
  await ctr(paths, ["containers", "delete", PROBE_CONTAINER_ID], signal);
  return true;
}

export function runtimeProbe(options: ProbeOptions): Runnable {
  const { paths } = options;
  return async (ctx) => {
    if (!existsSync(options.image)) throw new Error(`runtime probe image ${options.image} is missing: the node image was built without it`);
    ctx.logger.info("waiting for containerd");
    await options.ready.waitFor((ready) => ready, { signal: ctx.signal });
    await ctr(paths, ["images", "import", options.image], ctx.signal);
    if (await removeLeftover(paths, ctx.signal)) ctx.logger.warn("removed a probe container an earlier run left");
    ctx.logger.info("starting the probe container", { image: PROBE_IMAGE_REF, id: PROBE_CONTAINER_ID });
    const [command = "", ...args] = ctrArgv(paths, ["run", "--rm", "--cgroup", `${paths.cgroupPath}/containers/${PROBE_CONTAINER_ID}`, PROBE_IMAGE_REF, PROBE_CONTAINER_ID, "sh", "-c", PROBE_SCRIPT]);
    await runProcess(ctx, {
      command,
      args,
      env: runtimeEnv(paths.prefix),
      // ctr passes SIGTERM on to the container and waits for it through
      // containerd, which is being stopped beside it: then it waits forever.
      // It is only a client; what it leaves, the runtime's cgroup takes.
      killGraceMs: PROBE_KILL_GRACE_MS,
      ready: async (signal) => {
        while (!(await probeRunning(paths, signal).catch(() => false))) await sleep(RUNNING_POLL_MS, signal);
        ctx.logger.info("probe container running", { id: PROBE_CONTAINER_ID });
        options.onRunning?.();
      },
    });
  };
}
