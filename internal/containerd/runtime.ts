// The container runtime of a worker, as one runnable: containerd, the
// runtime probe, and, when a kubelet runs beside it (CRI on), the count of
// the kubelet's containers and the peer mirror. The role server decides
// whether it runs and with CRI or not (roleserve/worker_kubernetes.ts);
// what runs, and what the "containerd" line says about it, is decided here.
//
//   containerd (CRI on or off) ──▶ ready ──┬──▶ probe ──▶ "running"
//                                           ├──▶ imageStore offered
//                                           └──▶ census every 3 s (CRI on)
//   cri.podPrefix (clusternet) ──▶ the pods' CNI network written (CRI loads it)
//     containerd does not wait for the prefix: it starts and imports its
//     images while clusternet asks the curator for it, which took minutes
//     on a loaded cluster (a launched 3-VM cluster, 2026-11-29: containerd
//     began 2.5 min after the role, once the prefix came)
//   cri.peers ──▶ image-peers: this node's images to the other workers, theirs to containerd
//
// Runnables: containerd, probe, images (with an image store to offer),
// census and image-peers (with CRI). Lines: "containerd" (starting |
// running, with the census) and "image-peers" (starting | running).

import { Value } from "../event/mod.ts";
import { sleep, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { CRI_NAMESPACE, type RuntimePaths } from "./config.ts";
import { imageStore, type ImageStore } from "./images.ts";
import { imagePeersService, type ImagePeersOptions } from "./peer_mirror.ts";
import { runtimeProbe } from "./probe.ts";
import { containerdService, ctr, writeCniConflist } from "./service.ts";

/** How often the Kubernetes containers are counted for the containerd line. */
export const CENSUS_INTERVAL_MS = 3_000;

export interface ContainerRuntimeOptions {
  paths: RuntimePaths;
  /** Written: true while containerd answers (the kubelet waits for it). */
  ready: Value<boolean>;
  /** The probe's OCI image tarball (busybox; also the test image pods can run). */
  probeImage: string;
  /** Written: the image store while containerd answers (node management imports into it). */
  imageStore?: Value<ImageStore | undefined>;
  /** CRI on, for a kubelet beside containerd. */
  cri?: {
    /** The sandbox (pause) image's OCI tarball, imported before containerd counts as ready. */
    sandboxImage: string;
    /** Read: the node's pod prefix (clusternet); the pods' CNI network is written once it is known. */
    podPrefix: Value<string>;
    /** The peer mirror: the node's identity, the records, and the endpoint hosts.toml names. */
    peers: Omit<ImagePeersOptions, "contentRoot" | "onServing">;
  };
  /** The "containerd" and "image-peers" lines of `ctl node services`. */
  report: (component: "containerd" | "image-peers", state: "starting" | "running", message: string) => void;
}

export function containerRuntime(options: ContainerRuntimeOptions): Runnable {
  return async (ctx) => {
    const { paths, ready, cri, report } = options;
    report("containerd", "starting", "waiting for containerd to answer");
    ctx.run("containerd", containerdService({ paths, ready, ...(cri ? { cri: { images: [cri.sandboxImage, options.probeImage] } } : {}) }));
    if (cri) {
      ctx.run("pod-network", async (inner) => {
        using prefixes = cri.podPrefix.watch();
        let written: string | undefined;
        for (;;) {
          const prefix = await prefixes.get({ signal: inner.signal });
          if (prefix === written) continue;
          writeCniConflist(paths, prefix);
          written = prefix;
          inner.logger.info("the pods' network written for CRI", { prefix });
          inner.signalHealthy();
        }
      });
    }
    if (options.imageStore) ctx.run("images", offerImageStore(options.imageStore, paths, ready));
    const probeRuns = new Value<boolean>();
    probeRuns.set(false);
    if (cri) {
      ctx.run("image-peers", async (inner) => {
        report("image-peers", "starting", "the peer mirror: serving this node's images to the other workers");
        await imagePeersService({
          ...cri.peers,
          contentRoot: paths.root,
          onServing: () => report("image-peers", "running", `serving this node's images to the other workers on ${cri.peers.address}; containerd asks the workers first, by digest`),
        })(inner);
      });
      ctx.run(
        "census",
        census(paths, probeRuns, (message) => report("containerd", "running", message)),
      );
    }
    ctx.run(
      "probe",
      runtimeProbe({
        paths,
        ready,
        image: options.probeImage,
        onRunning: () => {
          probeRuns.set(true);
          report("containerd", "running", "containerd answers; the runtime probe container runs");
        },
      }),
    );
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}

/** Offers the image store (`ctl image import`, `ctl image list`) for as long as containerd answers. */
function offerImageStore(target: Value<ImageStore | undefined>, paths: RuntimePaths, ready: Value<boolean>): Runnable {
  return async (ctx) => {
    const store = imageStore(paths);
    try {
      for (;;) {
        await ready.waitFor((r) => r, { signal: ctx.signal });
        target.set(store);
        ctx.signalHealthy();
        await ready.waitFor((r) => !r, { signal: ctx.signal });
        target.set(undefined);
      }
    } finally {
      target.set(undefined);
    }
  };
}

/**
 * Counts the containers CRI keeps for the kubelet (its pods' containers and
 * sandboxes) once the probe runs, and says so on the containerd line, so
 * that the owner sees from `ctl node services` what runs on the node and
 * that a deleted pod left nothing behind.
 */
function census(paths: RuntimePaths, probeRuns: Value<boolean>, say: (message: string) => void): Runnable {
  return async (ctx) => {
    ctx.signalHealthy();
    let last = "";
    for (;;) {
      await probeRuns.waitFor((r) => r, { signal: ctx.signal });
      const containers = (await ctr(paths, ["containers", "ls", "--quiet"], ctx.signal, CRI_NAMESPACE)).split("\n").filter(Boolean).length;
      const message = `containerd answers; the runtime probe container runs; ${containers} Kubernetes container${containers === 1 ? "" : "s"} (pods and their sandboxes)`;
      if (message !== last) say(message);
      last = message;
      await sleep(CENSUS_INTERVAL_MS, ctx.signal);
    }
  };
}
