// A worker's persistent volumes, as the role server launches them: the
// volume store on the data partition, and the CSI plugin's two sockets in
// the kubelet's directory (csi.ts). The provisioner, which needs the
// apiserver, runs beside the kubelet (service_kubelet.ts) on the same store.
//
// Status line "volumes": starting, then running with the store's room.

import { join } from "node:path";
import { Identity, Node as CsiNode } from "../../proto/gen/csi/csi_pb.ts";
import { Registration } from "../../proto/gen/csi/pluginregistration_pb.ts";
import { addService, createServer, listenLocal, LOCAL_SERVICE } from "../rpc/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { ComponentState } from "./component.ts";
import { csiIdentityService, csiNodeService, csiRegistrationService, csiSockets } from "./csi.ts";
import { describeRoom, kernelQuotas, VolumeStore } from "./volume_store.ts";

/** The volume store of a node whose data partition holds `dataDir`: <dataDir>/volumes, under the kernel's project quotas. */
export function nodeVolumeStore(dataDir: string): VolumeStore {
  const root = join(dataDir, "volumes");
  return new VolumeStore(root, kernelQuotas(root));
}

export interface VolumesServiceOptions {
  store: VolumeStore;
  /** The kubelet's root directory: its plugins_registry, plugins and pods. */
  kubeletRoot: string;
  nodeName: string;
  report: (component: string, state: ComponentState, message: string) => void;
}

/** The CSI plugin of this node's volumes, registered with its kubelet. */
export function volumesService(options: VolumesServiceOptions): Runnable {
  return async (ctx) => {
    options.report("volumes", "starting", "the volume plugin: the store, then its sockets for the kubelet");
    const recovered = options.store.recover();
    if (recovered.length) ctx.logger.info("finished what an interrupted volume operation left", { removed: recovered.join(",") });
    const sockets = csiSockets(options.kubeletRoot);
    const csi = createServer();
    const registration = createServer();
    const local = { ca: LOCAL_SERVICE, onError: (method: string, err: unknown) => ctx.logger.info("volume plugin call failed", { method, error: String(err) }) };
    addService(csi, Identity, csiIdentityService(), { ...local, policy: { getPluginInfo: "local", getPluginCapabilities: "local", probe: "local" } });
    addService(csi, CsiNode, csiNodeService({ store: options.store, podsDir: sockets.podsDir, nodeName: options.nodeName }), {
      ...local,
      policy: { nodePublishVolume: "local", nodeUnpublishVolume: "local", nodeGetVolumeStats: "local", nodeExpandVolume: "local", nodeGetCapabilities: "local", nodeGetInfo: "local" },
    });
    addService(
      registration,
      Registration,
      csiRegistrationService(sockets.endpoint, (registered, error) => {
        if (registered) ctx.logger.info("the kubelet registered the volume plugin", { endpoint: sockets.endpoint });
        else ctx.logger.warn("the kubelet refused the volume plugin", { error });
      }),
      { ...local, policy: { getInfo: "local", notifyRegistrationStatus: "local" } },
    );
    try {
      // The CSI socket first: the kubelet dials it as soon as it sees the registration socket.
      await listenLocal(csi, sockets.endpoint);
      await listenLocal(registration, sockets.registration);
      const volumes = options.store.list();
      options.report("volumes", "running", `${volumes.length} volumes; ${describeRoom(options.store.room(volumes))}`);
      ctx.logger.info("volume plugin serving", { endpoint: sockets.endpoint, registration: sockets.registration });
      ctx.signalHealthy();
      await untilCancelled(ctx.signal);
    } finally {
      csi.forceShutdown();
      registration.forceShutdown();
    }
  };
}
