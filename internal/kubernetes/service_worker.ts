// What a kubernetes-worker node runs beside its container runtime, as one
// runnable: the pods' network (internal/clusternet), the registry
// configuration, the volume plugin, and the kubelet with what runs beside
// it (service_kubelet.ts). The role server launches it when the node may
// run a kubelet (roleserve/worker_kubernetes.ts), and passes what it asks
// the curator as two calls; everything else is done here.
//
//   curator ──register(mesh key)──▶ clusternet ──▶ podPrefix ──▶ (containerd's CRI network)
//   registries (the curator's watch) ──▶ registries: hosts.toml, kubelet credentials
//   data partition ──▶ volumes: the CSI plugin on the node's volume store
//   containerdReady ──▶ kubelet in <runtime cgroup>/kubelet, the pods below
//                       <runtime cgroup>/pods, certificates from issue()
//
// Runnables: clusternet, registries, volumes, kubelet. Lines: "clusternet",
// "registries", "volumes", "kubelet", "kube-proxy", "cluster-dns", ...

import { rmSync } from "node:fs";
import { join } from "node:path";
import type { ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import { clusterNetService } from "../clusternet/mod.ts";
import { delegatingCgroup, joinCgroup, type PeerMirrorEndpoint, type RuntimePaths } from "../containerd/mod.ts";
import type { Value } from "../event/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { ComponentState } from "./component.ts";
import { kubeletPath } from "./kubelet.ts";
import { REGISTRY_FILES, registriesService } from "./registries.ts";
import { kubeletService, type KubeletCertificates } from "./service_kubelet.ts";
import { nodeVolumeStore, volumesService } from "./volumes_service.ts";

/** What the worker asks the curator. */
export interface WorkerCurator {
  /** The kubelet's certificates (and those of what runs beside it) over its public key. */
  issueKubeletCertificates(publicKey: Uint8Array, signal: AbortSignal): Promise<KubeletCertificates>;
  /** Reports the mesh's public key; resolves to this node's pod prefix. */
  registerMesh(publicKey: Uint8Array, signal: AbortSignal): Promise<string>;
}

export interface WorkerServiceOptions {
  nodeId: string;
  address: string;
  binDir: string;
  /** tmpfs: the kubelet's files (certificates, configuration, registry logins). */
  dir: string;
  /** The data partition: the kubelet's key and root directory, the mesh key, the volumes. */
  dataDir: string;
  /** The container runtime's place: its socket, cgroup, tools and hosts.toml directory. */
  runtime: RuntimePaths;
  /** Read: true while containerd answers. */
  containerdReady: Value<boolean>;
  /** Read: the cluster's node records (the mesh's peers). */
  nodes: Value<readonly Node[]>;
  /** Written: this node's pod prefix, once the curator assigned it (containerd's CRI network waits for it). */
  podPrefix: Value<string>;
  /** Read: the cluster's registry configuration. */
  registries: Value<readonly ContainerRegistry[]>;
  /** The peer mirror's loopback endpoint (internal/containerd), named first in every hosts.toml. */
  peer: PeerMirrorEndpoint;
  /** The node's own DNS resolvers: the cluster DNS forwards names outside the cluster there. */
  resolvers?: (signal: AbortSignal) => Promise<string[]>;
  curator: WorkerCurator;
  report: (component: string, state: ComponentState, message: string) => void;
}

export function workerService(options: WorkerServiceOptions): Runnable {
  return async (ctx) => {
    const { runtime, report } = options;
    ctx.run(
      "clusternet",
      clusterNetService({
        nodeId: options.nodeId,
        keyFile: join(options.dataDir, "clusternet", "wireguard.key"),
        register: (publicKey, signal) => options.curator.registerMesh(publicKey, signal),
        nodes: options.nodes,
        podPrefix: options.podPrefix,
        report: (state, message) => report("clusternet", state, message),
      }),
    );
    ctx.run("registries", registriesService({ hostsDir: runtime.registryHosts, kubeletDir: options.dir, registries: options.registries, peer: options.peer, report }));
    // Persistent volumes: the plugin the kubelet mounts them with, and (beside the kubelet) the provisioner, on one store.
    const volumes = nodeVolumeStore(options.dataDir);
    const kubeletRoot = join(options.dataDir, "kubelet");
    ctx.run("volumes", volumesService({ store: volumes, kubeletRoot, nodeName: options.nodeId, report }));
    ctx.run("kubelet", async (inner) => {
      // The pods' cgroup root, with every controller delegated down to it.
      delegatingCgroup(runtime.cgroup.slice(0, runtime.cgroup.length - runtime.cgroupPath.length), join(runtime.cgroup, "pods"));
      await kubeletService({
        nodeId: options.nodeId,
        address: options.address,
        binDir: options.binDir,
        dir: options.dir,
        rootDir: kubeletRoot,
        keyFile: join(options.dataDir, "kubelet.key"),
        volumes,
        containerdSocket: runtime.socket,
        containerdReady: options.containerdReady,
        registries: options.registries,
        cgroupRoot: `${runtime.cgroupPath}/pods`,
        path: kubeletPath(runtime.prefix),
        dns: { binDir: `${runtime.prefix}/usr/bin`, upstreams: (await options.resolvers?.(inner.signal)) ?? [] },
        networkPolicy: { binDir: `${runtime.prefix}/usr/bin` },
        onSpawn: (pid) => {
          try {
            joinCgroup(join(runtime.cgroup, "kubelet"), pid);
          } catch (error) {
            inner.logger.warn("could not move the kubelet into the runtime's cgroup", { cgroup: runtime.cgroup, error: (error as Error).message });
          }
        },
        issue: (publicKey, signal) => options.curator.issueKubeletCertificates(publicKey, signal),
        report,
      })(inner);
    });
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}

/** Removes the registry configuration a worker wrote, its logins included: the role is gone. */
export function forgetRegistries(dir: string, runtime: RuntimePaths | undefined): void {
  rmSync(join(dir, REGISTRY_FILES.credentials), { force: true });
  if (runtime) rmSync(runtime.registryHosts, { recursive: true, force: true });
}
