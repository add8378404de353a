// Where containerd keeps its things on a node, and the configuration file
// it is started with. Pure: no I/O.

import { join } from "node:path";

/** The containerd namespace the node's own containers live in. */
export const CONTAINERD_NAMESPACE = "nodecore";

/**
 * containerd, its runc shim, runc and ctr, built from their Go modules
 * (image/upstream), at their paths in the system tree: out/system for a node
 * process, the system image mounted at /system on a VM (RuntimePaths.prefix).
 */
export const RUNTIME_BINARIES = {
  containerd: "/usr/bin/containerd",
  shim: "/usr/bin/containerd-shim-runc-v2",
  runc: "/usr/sbin/runc",
  ctr: "/usr/bin/ctr",
} as const;

/** The runtime's binaries below `prefix` ("" on a host, "/system" on a VM). */
export function runtimeBinaries(prefix: string): Record<keyof typeof RUNTIME_BINARIES, string> {
  const entries = Object.entries(RUNTIME_BINARIES).map(([name, path]) => [name, `${prefix}${path}`]);
  return Object.fromEntries(entries) as Record<keyof typeof RUNTIME_BINARIES, string>;
}

/** Where the system tree keeps the public CAs (Debian's ca-certificates, build.ts): the node has no /etc/ssl of its own. */
export const PUBLIC_CA_BUNDLE = "/usr/share/nodecore/ca-certificates.crt";

/**
 * The environment containerd and ctr run with: containerd finds its shim,
 * and the shim finds runc, through PATH. Their libraries are where the
 * loader looks by default (the image build puts them in the initramfs).
 * Public registries are verified against the tree's public CAs (Go reads
 * SSL_CERT_FILE). Containers get the environment of their image, not this one.
 */
export function runtimeEnv(prefix: string): Record<string, string> {
  return { PATH: `${prefix}/usr/bin:${prefix}/usr/sbin`, SSL_CERT_FILE: `${prefix}${PUBLIC_CA_BUNDLE}` };
}

/** The runtime's cgroup on a VM (below the unified hierarchy's root). */
export const RUNTIME_CGROUP = "nodecore-runtime";

/**
 * The runtime's cgroup name: RUNTIME_CGROUP on a VM; for a node process,
 * whose root is a directory, a name of its own per root, since several
 * node processes share the host's hierarchy.
 */
export function runtimeCgroupName(processRoot?: string): string {
  if (processRoot === undefined) return RUNTIME_CGROUP;
  return `${RUNTIME_CGROUP}-${new Bun.CryptoHasher("sha256").update(processRoot).digest("hex").slice(0, 12)}`;
}

/** The unix socket path limit (sun_path is 108 bytes, NUL included). */
const MAX_SOCKET_PATH = 107;

export interface RuntimePaths {
  /** Where the runtime's binaries are: the system tree (out/system) or the mounted system image (/system). */
  prefix: string;
  /** Persistent: images, snapshots, container metadata (on the data partition). */
  root: string;
  /** Runtime state: shim sockets, bundles (on tmpfs). */
  state: string;
  socket: string;
  config: string;
  /**
   * CRI's config_path (on tmpfs): one directory per registry host with its
   * hosts.toml and CA (registries.ts), read at every pull.
   */
  registryHosts: string;
  /**
   * Below the unified cgroup hierarchy: everything the runtime runs lives
   * here, containerd and its shims in <cgroup>/containerd, containers in
   * <cgroup>/containers/<id>. Killing it kills them all.
   */
  cgroup: string;
  /** The same cgroup as a path from the hierarchy's root ("/nodecore-runtime"), as runc takes it. */
  cgroupPath: string;
}

export class RuntimePathError extends Error {
  override name = "RuntimePathError";
}

/**
 * The runtime's paths: root below `dataDir`, state and socket below
 * `ephemeralDir`, cgroup `cgroupName` below `cgroupRoot`, binaries below
 * `prefix`.
 */
export function runtimePaths(dataDir: string, ephemeralDir: string, cgroupRoot: string, cgroupName: string, prefix = ""): RuntimePaths {
  const state = join(ephemeralDir, "containerd");
  const socket = join(state, "containerd.sock");
  if (socket.length > MAX_SOCKET_PATH) throw new RuntimePathError(`containerd socket path too long (${socket.length} > ${MAX_SOCKET_PATH} bytes): ${socket}`);
  if (!/^[a-z0-9][a-z0-9.-]*$/.test(cgroupName)) throw new RuntimePathError(`invalid runtime cgroup name ${JSON.stringify(cgroupName)}`);
  return {
    prefix,
    root: join(dataDir, "containerd"),
    state,
    socket,
    config: join(state, "config.toml"),
    registryHosts: join(state, "registries"),
    cgroup: join(cgroupRoot, cgroupName),
    cgroupPath: `/${cgroupName}`,
  };
}

/** A TOML basic string. */
const toml = (value: string): string => JSON.stringify(value);

/** The CRI plugins of containerd 2.x: the gRPC service and the two it is made of. */
export const CRI_PLUGIN = "io.containerd.grpc.v1.cri";
export const CRI_RUNTIME_PLUGIN = "io.containerd.cri.v1.runtime";
export const CRI_IMAGES_PLUGIN = "io.containerd.cri.v1.images";
const CRI_PLUGINS = [CRI_PLUGIN, CRI_RUNTIME_PLUGIN, CRI_IMAGES_PLUGIN] as const;

/** The sandbox ("pause") image every pod starts with: built here (image/pause.c), imported and pinned, never pulled. */
export const SANDBOX_IMAGE_REF = "nodecore.local/pause:1";
/** Where the system image puts the sandbox image's OCI tarball (below its mount point). */
export const SANDBOX_IMAGE_PATH = "/usr/share/nodecore/images/pause.oci.tar";
/** The busybox image pods can use with imagePullPolicy: Never (the runtime probe's image, under a second name). */
export const TEST_IMAGE_REF = "nodecore.local/busybox:1";
/** The CRI's containerd namespace (the kubelet's containers live there, the node's own in CONTAINERD_NAMESPACE). */
export const CRI_NAMESPACE = "k8s.io";

/**
 * Plugins the node does not use: storage drivers this kernel or layout does
 * not have. (The build leaves btrfs, devmapper and zfs out; these are the
 * ones that are in and would only log that they cannot start.) CRI is off
 * too unless a kubelet runs (containerdConfig's `cri`).
 */
export const DISABLED_PLUGINS = ["io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"] as const;

/**
 * The overlay snapshotter mounts every container's root file system with
 * `volatile`. Without it, the unmount of a container's root when its task
 * is deleted syncs the whole file system below it (overlayfs's sync_fs:
 * every dirty page of the data partition, etcd's and a running image
 * import's included, through dm-crypt). On a loaded node that took longer
 * than the 10 s containerd's CRI gives the handling of a container's exit:
 * the exit was retried with backoff, the pod stayed Running for minutes,
 * and the kubelet's StopContainer and KillPodSandbox ran out of time
 * (containerd issues 7496 and 8698; the option exists for this, kernel
 * 5.10 and later). What `volatile` gives up is the writes of a container's
 * own layer after a crash of the node: Kubernetes never starts a container
 * from an earlier container's layer, and what must survive lives in a
 * volume, so nothing a pod keeps is lost.
 */
export const OVERLAY_SNAPSHOTTER_PLUGIN = "io.containerd.snapshotter.v1.overlayfs";
export const OVERLAY_MOUNT_OPTIONS = ["volatile"] as const;

/** The CNI conflist of the node's pods, its folder, the plugins' folder and host-local's state. */
export function cniPaths(paths: RuntimePaths): { conflist: string; confDir: string; binDir: string; ipamDir: string } {
  const confDir = join(paths.state, "cni");
  return {
    conflist: join(confDir, "10-nodecore.conflist"),
    confDir,
    binDir: `${paths.prefix}/usr/lib/cni`,
    ipamDir: join(paths.state, "cni-ipam"),
  };
}

/**
 * The CNI network of this node's pods: a bridge (the pods' gateway, the
 * prefix's first address) with addresses from the node's pod prefix, which
 * the curator assigned (internal/clusternet); pods on other nodes are
 * reached through the WireGuard mesh, whose routes clusternet keeps. CRI
 * reads it from its conf_dir; until it is there the node is NotReady ("cni
 * plugin not initialized").
 */
export function cniConflist(paths: RuntimePaths, podPrefix: string): string {
  const network = {
    cniVersion: "1.0.0",
    name: "nodecore",
    plugins: [
      {
        type: "bridge",
        bridge: "nodecore0",
        isGateway: true,
        ipMasq: false,
        hairpinMode: true,
        ipam: { type: "host-local", ranges: [[{ subnet: podPrefix }]], routes: [{ dst: "0.0.0.0/0" }], dataDir: cniPaths(paths).ipamDir },
      },
    ],
  };
  return JSON.stringify(network, null, 2) + "\n";
}

/**
 * containerd's config.toml (format version 3, containerd 2.x) for these
 * paths. With `cri` (a kubelet runs), CRI serves on the same socket: runc
 * through the v2 shim, overlayfs snapshots, cgroupfs (the kubelet takes the
 * driver from containerd), the sandbox image pinned so that the kubelet's
 * image collection never removes it, CNI from cniConflist. Without it, CRI
 * is disabled.
 */
export function containerdConfig(paths: RuntimePaths, options: { cri?: boolean } = {}): string {
  const disabled = options.cri ? DISABLED_PLUGINS : [...CRI_PLUGINS, ...DISABLED_PLUGINS];
  const cni = cniPaths(paths);
  const runtime = `plugins.${toml(CRI_RUNTIME_PLUGIN)}`;
  const images = `plugins.${toml(CRI_IMAGES_PLUGIN)}`;
  const cri = options.cri
    ? [
        `[${images}]`,
        '  snapshotter = "overlayfs"',
        `  [${images}.pinned_images]`,
        `    sandbox = ${toml(SANDBOX_IMAGE_REF)}`,
        // Read at every pull: the cluster's registry configuration applies without a restart.
        `  [${images}.registry]`,
        `    config_path = ${toml(paths.registryHosts)}`,
        "",
        `[${runtime}]`,
        "  enable_cdi = false",
        // Network namespaces on tmpfs below the state, not in the host's /var/run/netns.
        "  netns_mounts_under_state_dir = true",
        `  [${runtime}.containerd]`,
        '    default_runtime_name = "runc"',
        `    [${runtime}.containerd.runtimes.runc]`,
        '      runtime_type = "io.containerd.runc.v2"',
        `      [${runtime}.containerd.runtimes.runc.options]`,
        "        SystemdCgroup = false",
        `        BinaryName = ${toml(runtimeBinaries(paths.prefix).runc)}`,
        `  [${runtime}.cni]`,
        `    bin_dirs = [${toml(cni.binDir)}]`,
        `    conf_dir = ${toml(cni.confDir)}`,
        "    use_internal_loopback = true",
        "",
        `[plugins.${toml(CRI_PLUGIN)}]`,
        "  disable_tcp_service = true",
        // kubectl exec/attach/port-forward: the kubelet proxies to this server on loopback.
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "",
      ]
    : [];
  return [
    "version = 3",
    `root = ${toml(paths.root)}`,
    `state = ${toml(paths.state)}`,
    `disabled_plugins = [${disabled.map(toml).join(", ")}]`,
    "",
    "[grpc]",
    `  address = ${toml(paths.socket)}`,
    "",
    "[ttrpc]",
    `  address = ${toml(`${paths.socket}.ttrpc`)}`,
    "",
    `[plugins.${toml(OVERLAY_SNAPSHOTTER_PLUGIN)}]`,
    `  mount_options = [${OVERLAY_MOUNT_OPTIONS.map(toml).join(", ")}]`,
    "",
    ...cri,
  ].join("\n");
}
