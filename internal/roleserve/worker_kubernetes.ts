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
//             "kubernetes" line          └──▶ worker part ─┬──▶ runtime (containerd:
//                                                          │    containerd, probe, census, peers)
//                                                          ├──▶ registry-watch (curator)
//                                                          └──▶ node (kubernetes: clusternet,
//                                                               registries, volumes, kubelet)
//   This file decides and launches; what runs is internal/containerd's and
//   internal/kubernetes', and what they ask the curator is
//   kubernetes_curator.ts'.
//   Each part starts over only when its own part of the decision changes:
//   a controller given the worker role keeps its apiserver running.
//
// Board lines: "kubernetes" (not-assigned | unavailable | launched),
// "kube-apiserver", "kube-controller-manager", "kube-scheduler", "metrics-server" (only on a
// controller) and "kubelet" (only on a worker with the binaries), each
// waiting | starting | running | restarting; "clusternet" (starting |
// running, with the mesh's peers and their last handshakes); and "containerd"
// (not-assigned | unavailable | starting | running).

import { existsSync } from "node:fs";
import { join } from "node:path";
import type { ContainerRegistry, NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import { INTERFACE_NAME, leaveMesh } from "../clusternet/mod.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { issueEtcdClientCertificate } from "../consensus/mod.ts";
import { containerRuntime, killCgroup, peerMirrorEndpoint, runtimeBinaries, type ImageStore, type RuntimePaths } from "../containerd/mod.ts";
import { Value } from "../event/mod.ts";
import { CONTROLLER_COMPONENTS, controllerService, forgetRegistries, workerService } from "../kubernetes/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { RestartRequest, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import type { CuratorConnection } from "./curator_connection.ts";
import { registryWatch, workerCurator } from "./kubernetes_curator.ts";
import type { ServiceBoard } from "./service_status.ts";
import type { LocalConsensus } from "./worker_controlplane.ts";

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
    const curator = local.curator;
    const etcdCA = await curator.ca("etcd");
    const key = generateKeyPair();
    const client = { certificate: issueEtcdClientCertificate(etcdCA, key.publicKey, "kube-apiserver"), privateKey: key.privateKey };
    ctx.run(
      "controller",
      controllerService({
        etcd: local.kubernetes,
        etcdAccess: { url: local.url, ca: local.ca, client },
        address: membership.address,
        binDir: options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR,
        dir: join(options.ephemeralDir, "controller"),
        report: (component, state, message) => options.board.report(component, state, message),
        manifests: { stored: () => curator.manifests(), nodeId: membership.credentials.nodeId },
        records: async () => {
          const nodes = await curator.nodes();
          const holding = (role: "kubernetesWorker" | "kubernetesController") => new Map(nodes.filter((n) => n.roles?.[role]).map((n) => [n.id, n.status?.externalAddress ?? ""]));
          return { workers: holding("kubernetesWorker"), controllers: holding("kubernetesController"), known: new Set(nodes.map((n) => n.id)) };
        },
      }),
    );
    ctx.signalHealthy();
    await options.localConsensus.waitFor((l) => l !== local, { signal: ctx.signal });
    throw new RestartRequest("the local etcd member stopped");
  };
}

/** The kubelet's files on tmpfs: its certificates, configuration and registry logins. */
const kubeletDir = (options: KubernetesOptions) => join(options.ephemeralDir, "kubelet");

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
 * (what an earlier run left); with it, the container runtime
 * (internal/containerd), and the kubelet's node (internal/kubernetes:
 * mesh, registries, volumes, kubelet) when the decision launches it.
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
      forgetRegistries(kubeletDir(options), runtime?.paths);
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
        const report = (component: string, state: string, message: string) => options.board.report(component, state, message);
        const containers = { paths: runtime.paths, ready, probeImage: runtime.probeImage, ...(options.imageStore ? { imageStore: options.imageStore } : {}), report };
        if (!launch.kubelet) {
          ctx.run("runtime", containerRuntime(containers));
        } else {
          // The kubelet's node: its mesh gives the pod prefix that the pods' CNI network takes (containerd starts without it).
          const { credentials, address } = await options.membership.get({ signal: ctx.signal });
          const podPrefix = new Value<string>();
          const registries = new Value<readonly ContainerRegistry[]>();
          const peer = peerMirrorEndpoint();
          const peers = { tls: credentials, address, nodes: options.nodes, endpoint: peer };
          ctx.run("runtime", containerRuntime({ ...containers, cri: { sandboxImage: runtime.sandboxImage, podPrefix, peers } }));
          ctx.run("registry-watch", registryWatch(options.connection, registries));
          ctx.run(
            "node",
            workerService({
              nodeId: credentials.nodeId,
              address,
              binDir: options.binDir ?? DEFAULT_KUBERNETES_BIN_DIR,
              dir: kubeletDir(options),
              dataDir: options.dataDir,
              runtime: runtime.paths,
              containerdReady: ready,
              nodes: options.nodes,
              podPrefix,
              registries,
              peer,
              ...(options.resolvers ? { resolvers: options.resolvers } : {}),
              curator: workerCurator(options.connection),
              report,
            }),
          );
        }
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
