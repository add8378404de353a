// The Kubernetes worker: runs what this node's Kubernetes roles need.
//
//  - kubernetes-controller (only beside consensus, as in Metropolis: the
//    apiserver stores its objects in the local etcd member): the
//    controller service (internal/kubernetes), once the local member
//    serves: kube-apiserver, then kube-controller-manager and
//    kube-scheduler, with the PKI from etcd and their files on tmpfs.
//  - kubernetes-worker: the container runtime (internal/containerd):
//    containerd, and the runtime probe, a real container kept running
//    while the node holds the role; on a VM, the kubelet beside it (CRI on,
//    the sandbox and test images imported) and a census of its containers,
//    and the cluster network (internal/clusternet): the WireGuard mesh,
//    whose pod prefix the pods' CNI configuration takes.
//    A node process runs no kubelet (noKubelet). Without the role, the
//    runtime's cgroup is emptied and the node says that no container
//    process is left.
//  - Both roles: the system image is prepared (mounted on a VM) and the
//    Kubernetes binaries are checked for; a node without them says which
//    are missing.
//
//   roles ──▶ decision ──(what may run)──┬──▶ controller part ─▶ controller service
//             "kubernetes" line          └──▶ worker part ─────▶ containerd, probe,
//                                                                 kubelet, census
//   Each part starts over only when its own part of the decision changes:
//   a controller given the worker role keeps its apiserver running.
//
// Board lines: "kubernetes" (not-assigned | unavailable | launched),
// "kube-apiserver", "kube-controller-manager", "kube-scheduler" (only on a
// controller) and "kubelet" (only on a worker with the binaries), each
// waiting | starting | running | restarting; "clusternet" (starting |
// running, with the mesh's peers and their last handshakes); and "containerd"
// (not-assigned | unavailable | starting | running).

import { existsSync, rmSync } from "node:fs";
import { join } from "node:path";
import type { NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import { clusterNetService, INTERFACE_NAME, leaveMesh } from "../clusternet/mod.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { issueEtcdClientCertificate } from "../consensus/mod.ts";
import { curatorReader } from "../curator/mod.ts";
import { CONTROLLER_COMPONENTS, controllerService, kubeletPath, kubeletService, nodeVolumeStore, registriesService, REGISTRY_FILES, volumesService, type VolumeStore } from "../kubernetes/mod.ts";
import type { ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { X509Certificate } from "node:crypto";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";
import type { LocalConsensus } from "./worker_controlplane.ts";
import {
  CRI_NAMESPACE,
  ctr,
  delegatingCgroup,
  imagePeersService,
  imageStore,
  joinCgroup,
  containerdService,
  killCgroup,
  peerMirrorEndpoint,
  runtimeBinaries,
  runtimeProbe,
  type ImageStore,
  type PeerMirrorEndpoint,
  type RuntimePaths,
} from "../containerd/mod.ts";
import { Value } from "../event/mod.ts";
import { RestartRequest, sleep, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { ServiceBoard } from "./service_status.ts";

/** Where the node image puts the Kubernetes binaries (built from their Go modules, or the user's own). */
export const DEFAULT_KUBERNETES_BIN_DIR = "/system/kubernetes/bin";
/** The kubelet and kube-proxy: the binaries the worker role adds. */
const WORKER_BINARIES = ["kubelet", "kube-proxy"] as const;

/** The container runtime's place on this node. */
export interface RuntimeSetup {
  paths: RuntimePaths;
  /** The probe's OCI image tarball (busybox; also the test image pods can run). */
  probeImage: string;
  /** The sandbox (pause) image's OCI tarball, imported for the kubelet. */
  sandboxImage: string;
}

/** The deadline of the kubelet's certificate call. */
const ISSUE_TIMEOUT_MS = 10_000;

export interface KubernetesOptions {
  /** Read: the node's address. */
  membership: Value<ClusterMembership>;
  /** Read. */
  roles: Value<NodeRoles | undefined>;
  /** Read: the local etcd member while it serves (the controller needs it). */
  localConsensus: Value<LocalConsensus | undefined>;
  /** Written: the lines named above. */
  board: ServiceBoard;
  binDir?: string;
  /**
   * Makes the system image's files available, the Kubernetes binaries and
   * the container runtime's (on a VM: mounts it); throws, naming what is
   * missing. Called once per decision, when the node has a Kubernetes role.
   */
  prepare?: () => void;
  /** A tmpfs directory for the components' certificates, keys and kubeconfigs. */
  ephemeralDir: string;
  /** On the data partition: the kubelet's key and root directory. */
  dataDir: string;
  /** Read: the curator (the kubelet's certificates, the mesh key and pod prefix). */
  connection: Value<CuratorConnection>;
  /** Read: the cluster's node records (the mesh's peers). */
  nodes: Value<readonly Node[]>;
  /** Absent where the node cannot run containers (no cgroup v2): it says so when given the worker role. */
  runtime?: RuntimeSetup;
  /**
   * Why this node runs no kubelet, if it runs none: a node process shares
   * its host with others, and a kubelet needs a machine of its own (it sets
   * kernel parameters, makes the pods' bridge in the host's network, and
   * mounts below its root). The worker role then runs the container runtime
   * only, and says so.
   */
  noKubelet?: string;
  /** The node's own DNS resolvers: the cluster DNS forwards names outside the cluster there. */
  resolvers?: (signal: AbortSignal) => Promise<string[]>;
  /** Written: the Kubernetes image store while the worker's containerd answers (node management imports into it). */
  imageStore?: Value<ImageStore | undefined>;
}

const wantsOf = (roles: NodeRoles | undefined) => ({
  controller: Boolean(roles?.kubernetesController),
  worker: Boolean(roles?.kubernetesWorker),
  // The controller runs only beside a consensus member, so losing or
  // gaining that role decides again too.
  consensus: Boolean(roles?.kubernetesController && roles.consensusMember),
});
type Wants = ReturnType<typeof wantsOf>;

/** What may be launched, once the binaries were checked. */
interface Launch {
  controller: boolean;
  kubelet: boolean;
}

/**
 * Checks the binaries the roles need and says so on the "kubernetes" line;
 * returns what can be launched.
 */
function reportBinaries(options: KubernetesOptions, wants: Wants, unprepared: string | undefined, log: (message: string, missing: boolean) => void): Launch {
  const binDir = options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR;
  const none = { controller: false, kubelet: false };
  if (!wants.controller && !wants.worker) {
    options.board.report("kubernetes", "not-assigned", "this node has no Kubernetes role");
    return none;
  }
  const kubelet = wants.worker && !options.noKubelet;
  const needed = [...(wants.controller ? CONTROLLER_COMPONENTS : []), ...(kubelet ? WORKER_BINARIES : [])];
  const missing = needed.filter((b) => !existsSync(join(binDir, b)));
  const unavailable = (message: string): Launch => {
    log(message, true);
    options.board.report("kubernetes", "unavailable", message);
    return none;
  };
  if (unprepared) return unavailable(`Kubernetes binaries unavailable: ${unprepared}`);
  if (missing.length) {
    return unavailable(`Kubernetes binaries not found in ${binDir} (missing: ${missing.join(", ")}); build the image with the Kubernetes server binaries to run them`);
  }
  if (wants.controller && !wants.consensus) {
    return unavailable("the kubernetes-controller role runs only on a consensus member (the apiserver keeps its objects in the local etcd); give this node the consensus role too");
  }
  const parts = [
    ...(wants.controller ? ["controller: kube-apiserver, kube-controller-manager, kube-scheduler"] : []),
    ...(wants.worker
      ? [
          options.noKubelet
            ? `worker: containerd only, no kubelet (${options.noKubelet})`
            : options.runtime
              ? "worker: kubelet beside containerd"
              : "worker: no kubelet, this node cannot run containers (see containerd)",
        ]
      : []),
  ];
  const message = `${parts.join("; ")} (each has its own line)`;
  log(message, false);
  options.board.report("kubernetes", "launched", message);
  return { controller: wants.controller, kubelet: kubelet && options.runtime !== undefined };
}

/**
 * The controller: waits for the local etcd member, gives the apiserver an
 * etcd client certificate of its own, and runs the controller service.
 * When the member stops, the controller stops with it and starts over.
 */
function controllerRunnable(options: KubernetesOptions): Runnable {
  return async (ctx) => {
    for (const component of CONTROLLER_COMPONENTS) options.board.report(component, "waiting", "for the local etcd member");
    const local = await options.localConsensus.waitFor((l) => l !== undefined, { signal: ctx.signal });
    const membership = await options.membership.get({ signal: ctx.signal });
    const curator = curatorReader(local.etcd);
    const etcdCA = await curator.ca("etcd");
    const key = generateKeyPair();
    const client = { certificate: issueEtcdClientCertificate(etcdCA, key.publicKey, "kube-apiserver"), privateKey: key.privateKey };
    ctx.run(
      "controller",
      controllerService({
        etcd: local.etcd,
        etcdAccess: { url: local.url, ca: local.ca, client },
        address: membership.address,
        binDir: options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR,
        dir: join(options.ephemeralDir, "controller"),
        report: (component, state, message) => options.board.report(component, state, message),
        records: async () => {
          const nodes = await curator.nodes();
          return { workers: new Map(nodes.filter((n) => n.roles?.kubernetesWorker).map((n) => [n.id, n.status?.externalAddress ?? ""])), known: new Set(nodes.map((n) => n.id)) };
        },
      }),
    );
    ctx.signalHealthy();
    await options.localConsensus.waitFor((l) => l !== local, { signal: ctx.signal });
    throw new RestartRequest("the local etcd member stopped");
  };
}

/** The kubelet, beside containerd, in the runtime's cgroup; its certificates come from the curator. */
function kubeletRunnable(options: KubernetesOptions, runtime: RuntimeSetup, containerdReady: Value<boolean>, registries: Value<readonly ContainerRegistry[]>, volumes: VolumeStore): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const { paths } = runtime;
    // The pods' cgroup root, with every controller delegated down to it.
    delegatingCgroup(paths.cgroup.slice(0, paths.cgroup.length - paths.cgroupPath.length), join(paths.cgroup, "pods"));
    await kubeletService({
      nodeId: membership.credentials.nodeId,
      address: membership.address,
      binDir: options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR,
      dir: kubeletDir(options),
      rootDir: join(options.dataDir, "kubelet"),
      keyFile: join(options.dataDir, "kubelet.key"),
      volumes,
      containerdSocket: paths.socket,
      containerdReady,
      registries,
      cgroupRoot: `${paths.cgroupPath}/pods`,
      path: kubeletPath(paths.prefix),
      dns: { binDir: `${paths.prefix}/usr/bin`, upstreams: (await options.resolvers?.(ctx.signal)) ?? [] },
      onSpawn: (pid) => {
        try {
          joinCgroup(join(paths.cgroup, "kubelet"), pid);
        } catch (error) {
          ctx.logger.warn("could not move the kubelet into the runtime's cgroup", { cgroup: paths.cgroup, error: (error as Error).message });
        }
      },
      issue: async (publicKey, signal) => {
        const connection = await options.connection.get({ signal });
        const response = await withCurator(connection, (client) => client.issueKubeletCertificates({ kubeletPublicKey: publicKey }, { timeoutMs: ISSUE_TIMEOUT_MS, signal }));
        return {
          ca: new X509Certificate(response.caCertificate),
          server: new X509Certificate(response.serverCertificate),
          client: new X509Certificate(response.clientCertificate),
          proxy: new X509Certificate(response.proxyClientCertificate),
          dns: new X509Certificate(response.dnsClientCertificate),
          volumes: new X509Certificate(response.volumesClientCertificate),
          apiservers: response.apiservers,
        };
      },
      report: (component, state, message) => options.board.report(component, state, message),
    })(ctx);
  };
}

/** The peer mirror (internal/containerd/peer_mirror.ts): this node's images to the other workers, theirs to its containerd. */
function imagePeersRunnable(options: KubernetesOptions, runtime: RuntimeSetup, endpoint: PeerMirrorEndpoint): Runnable {
  return async (ctx) => {
    options.board.report("image-peers", "starting", "the peer mirror: serving this node's images to the other workers");
    const { credentials, address } = await options.membership.get({ signal: ctx.signal });
    await imagePeersService({
      tls: credentials,
      address,
      nodes: options.nodes,
      contentRoot: runtime.paths.root,
      endpoint,
      onServing: () => options.board.report("image-peers", "running", `serving this node's images to the other workers on ${address}; containerd asks the workers first, by digest`),
    })(ctx);
  };
}

/**
 * Follows the cluster's registry configuration (Curator.WatchContainerRegistries)
 * into `registries`; a new set of curators means following through the best one again.
 */
function registryWatchRunnable(options: KubernetesOptions, registries: Value<readonly ContainerRegistry[]>): Runnable {
  return async (ctx) => {
    const connection = await options.connection.get({ signal: ctx.signal });
    const reconnect = options.connection.waitFor((c) => c !== connection, { signal: ctx.signal }).then(() => {
      throw new RestartRequest("the curators changed");
    });
    reconnect.catch(() => {});
    const watching = withCurator(connection, async (client) => {
      for await (const message of client.watchContainerRegistries({}, { signal: ctx.signal })) {
        registries.set(message.registries);
        ctx.signalHealthy();
      }
    });
    await Promise.race([watching, reconnect]);
    if (!ctx.signal.aborted) throw new Error("the curator ended the registry watch");
  };
}

/** The kubelet's files on tmpfs: its certificates, configuration and registry logins. */
function kubeletDir(options: KubernetesOptions): string {
  return join(options.ephemeralDir, "kubelet");
}

/** Removes the registry configuration a worker wrote (its logins included): the role is gone. */
function forgetRegistries(options: KubernetesOptions, runtime: RuntimeSetup | undefined): void {
  rmSync(join(kubeletDir(options), REGISTRY_FILES.credentials), { force: true });
  if (runtime) rmSync(runtime.paths.registryHosts, { recursive: true, force: true });
}

/** Offers the image store (`ctl image import`, `ctl image list`) for as long as containerd answers. */
function imagesRunnable(target: Value<ImageStore | undefined>, paths: RuntimePaths, ready: Value<boolean>): Runnable {
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

/** The deadline of the call that reports the mesh key and gets the pod prefix. */
const CLUSTER_NETWORKING_TIMEOUT_MS = 10_000;

/** The mesh (internal/clusternet): its key on the data partition, its prefix from the curator. */
function clusterNetRunnable(options: KubernetesOptions, podPrefix: Value<string>): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    await clusterNetService({
      nodeId: membership.credentials.nodeId,
      keyFile: join(options.dataDir, "clusternet", "wireguard.key"),
      register: async (publicKey, signal) => {
        const connection = await options.connection.get({ signal });
        const response = await withCurator(connection, (client) => client.updateNodeClusterNetworking({ wireguardPublicKey: publicKey }, { timeoutMs: CLUSTER_NETWORKING_TIMEOUT_MS, signal }));
        return response.podPrefix;
      },
      nodes: options.nodes,
      podPrefix,
      report: (state, message) => options.board.report("clusternet", state, message),
    })(ctx);
  };
}

/** How often the Kubernetes containers are counted for the containerd line. */
const CENSUS_INTERVAL_MS = 3_000;

/**
 * Counts the containers CRI keeps for the kubelet (its pods' containers and
 * sandboxes) and says so on the containerd line, so that the owner sees
 * from `ctl node services` what runs on the node and that a deleted pod
 * left nothing behind.
 */
function censusRunnable(options: KubernetesOptions, runtime: RuntimeSetup, probeRuns: Value<boolean>): Runnable {
  return async (ctx) => {
    ctx.signalHealthy();
    let last = "";
    for (;;) {
      await probeRuns.waitFor((r) => r, { signal: ctx.signal });
      const containers = (await ctr(runtime.paths, ["containers", "ls", "--quiet"], ctx.signal, CRI_NAMESPACE)).split("\n").filter(Boolean).length;
      const message = `containerd answers; the runtime probe container runs; ${containers} Kubernetes container${containers === 1 ? "" : "s"} (pods and their sandboxes)`;
      if (message !== last) options.board.report("containerd", "running", message);
      last = message;
      await sleep(CENSUS_INTERVAL_MS, ctx.signal);
    }
  };
}

/** What the decision says, for the two parts that act on it. */
interface Decision {
  wants: Wants;
  launch: Launch;
  /** Why the system image's files cannot be had, if they cannot. */
  unprepared: string | undefined;
}

/**
 * The decision: waits for the roles, makes the system image's files
 * available, checks the binaries, says so on the "kubernetes" line, and
 * publishes what may run. A change of the Kubernetes roles means deciding
 * again; the controller and worker parts restart only when their own part
 * of the decision changed, so that giving a controller the worker role
 * does not restart its apiserver.
 */
function decide(options: KubernetesOptions, decision: Value<Decision>): Runnable {
  return async (ctx) => {
    const roles = await options.roles.waitFor((r) => r !== undefined, { signal: ctx.signal });
    const wants = wantsOf(roles);
    let unprepared: string | undefined;
    if (wants.controller || wants.worker) {
      try {
        options.prepare?.();
      } catch (error) {
        unprepared = (error as Error).message;
      }
    }
    const launch = reportBinaries(options, wants, unprepared, (message, missing) => (missing ? ctx.logger.warn(message) : ctx.logger.info(message)));
    decision.set({ wants, launch, unprepared });
    ctx.signalHealthy();
    await options.roles.waitFor((r) => JSON.stringify(wantsOf(r)) !== JSON.stringify(wants), { signal: ctx.signal });
    throw new RestartRequest("Kubernetes roles changed");
  };
}

/** The controller part: the controller service while the decision launches it. */
function controllerPart(options: KubernetesOptions, decision: Value<Decision>): Runnable {
  return async (ctx) => {
    const { launch } = await decision.get({ signal: ctx.signal });
    if (launch.controller) {
      ctx.run("controller", controllerRunnable(options));
    } else {
      for (const component of CONTROLLER_COMPONENTS) options.board.withdraw(component);
    }
    ctx.signalHealthy();
    await decision.waitFor((d) => d.launch.controller !== launch.controller, { signal: ctx.signal });
    throw new RestartRequest(launch.controller ? "the controller is no longer launched" : "the controller is launched");
  };
}

/** What the worker part acts on: when it differs, the part starts over. */
const workerKey = (d: Decision) => JSON.stringify({ worker: d.wants.worker, kubelet: d.launch.kubelet, unprepared: d.unprepared });

/**
 * The worker part: without the worker role, empties the runtime's cgroup
 * (what an earlier run left); with it, containerd, the probe, and the
 * kubelet with the container census when the decision launches it.
 */
function workerPart(options: KubernetesOptions, decision: Value<Decision>): Runnable {
  return async (ctx) => {
    const current = await decision.get({ signal: ctx.signal });
    const { wants, launch, unprepared } = current;
    if (!launch.kubelet) {
      for (const line of ["kubelet", "kube-proxy", "cluster-dns"]) options.board.withdraw(line);
      options.board.withdraw("clusternet");
      // A node that runs no kubelet keeps no mesh: a device an earlier run made goes, with its routes and rule.
      if (!options.noKubelet && (await leaveMesh(ctx.signal))) ctx.logger.info("removed the WireGuard device", { device: INTERFACE_NAME });
    }
    const runtime = options.runtime;
    if (!wants.worker) {
      // Registry logins end with the role: the curator ends the worker's
      // watch, and what the worker wrote of them goes from its tmpfs.
      forgetRegistries(options, runtime);
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
      const missing = unprepared
        ? [unprepared]
        : [...Object.values(runtimeBinaries(runtime.paths.prefix)), runtime.probeImage, ...(launch.kubelet ? [runtime.sandboxImage] : [])].filter((file) => !existsSync(file));
      if (missing.length) {
        const message = `container runtime files missing: ${missing.join(", ")}`;
        ctx.logger.warn(message);
        options.board.report("containerd", "unavailable", message);
      } else {
        const ready = new Value<boolean>();
        ready.set(false);
        if (launch.kubelet) {
          // The pods' network: the mesh first, for the pod prefix the CNI configuration needs.
          const podPrefix = new Value<string>();
          ctx.run("clusternet", clusterNetRunnable(options, podPrefix));
          options.board.report("containerd", "starting", "waiting for the node's pod prefix (clusternet), then for containerd to answer");
          ctx.run("containerd", async (inner) => {
            const prefix = await podPrefix.get({ signal: inner.signal });
            options.board.report("containerd", "starting", "waiting for containerd to answer");
            await containerdService({ paths: runtime.paths, ready, cri: { images: [runtime.sandboxImage, runtime.probeImage], podPrefix: prefix } })(inner);
          });
        } else {
          options.board.report("containerd", "starting", "waiting for containerd to answer");
          ctx.run("containerd", containerdService({ paths: runtime.paths, ready }));
        }
        if (options.imageStore) ctx.run("images", imagesRunnable(options.imageStore, runtime.paths, ready));
        const probeRuns = new Value<boolean>();
        probeRuns.set(false);
        if (launch.kubelet) {
          const registries = new Value<readonly ContainerRegistry[]>();
          const peer = peerMirrorEndpoint();
          ctx.run("registry-watch", registryWatchRunnable(options, registries));
          ctx.run("image-peers", imagePeersRunnable(options, runtime, peer));
          ctx.run(
            "registries",
            registriesService({
              hostsDir: runtime.paths.registryHosts,
              kubeletDir: kubeletDir(options),
              registries,
              peer,
              report: (component, state, message) => options.board.report(component, state, message),
            }),
          );
          // Persistent volumes: the plugin the kubelet mounts them with, and (beside the kubelet) the provisioner, on one store.
          const volumes = nodeVolumeStore(options.dataDir);
          ctx.run("volumes", volumesService({ store: volumes, kubeletRoot: join(options.dataDir, "kubelet"), nodeName: (await options.membership.get({ signal: ctx.signal })).credentials.nodeId, report: (component, state, message) => options.board.report(component, state, message) }));
          ctx.run("kubelet", kubeletRunnable(options, runtime, ready, registries, volumes));
          ctx.run("census", censusRunnable(options, runtime, probeRuns));
        }
        ctx.run(
          "probe",
          runtimeProbe({
            paths: runtime.paths,
            ready,
            image: runtime.probeImage,
            onRunning: () => {
              probeRuns.set(true);
              options.board.report("containerd", "running", "containerd answers; the runtime probe container runs");
            },
          }),
        );
      }
    }
    ctx.signalHealthy();
    await decision.waitFor((d) => workerKey(d) !== workerKey(current), { signal: ctx.signal });
    throw new RestartRequest("the worker's part of the Kubernetes roles changed");
  };
}

export function kubernetesWorker(options: KubernetesOptions): Runnable {
  return async (ctx) => {
    const decision = new Value<Decision>();
    ctx.run("decision", decide(options, decision));
    ctx.run("controller", controllerPart(options, decision));
    ctx.run("worker", workerPart(options, decision));
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}
