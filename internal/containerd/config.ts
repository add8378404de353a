// Where containerd keeps its things on a node, and the configuration file
// it is started with. Pure: no I/O.

import { join } from "node:path";

/** The containerd namespace the node's own containers live in. */
export const CONTAINERD_NAMESPACE = "nodecore";

/**
 * Debian's containerd, runc and ctr, at their paths on a Debian host and
 * in the node's system image (mounted at /system on a VM: RuntimePaths.prefix).
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

/**
 * The environment containerd and ctr run with: containerd finds its shim,
 * and the shim finds runc, through PATH. Their libraries are where the
 * loader looks by default (the image build puts them in the initramfs).
 * Containers get the environment of their image, not this one.
 */
export function runtimeEnv(prefix: string): Record<string, string> {
  return { PATH: `${prefix}/usr/bin:${prefix}/usr/sbin` };
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
  /** Where the runtime's binaries are: "" (a Debian host) or a mounted system image. */
  prefix: string;
  /** Persistent: images, snapshots, container metadata (on the data partition). */
  root: string;
  /** Runtime state: shim sockets, bundles (on tmpfs). */
  state: string;
  socket: string;
  config: string;
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
    cgroup: join(cgroupRoot, cgroupName),
    cgroupPath: `/${cgroupName}`,
  };
}

/** A TOML basic string. */
const toml = (value: string): string => JSON.stringify(value);

export const CRI_PLUGIN = "io.containerd.grpc.v1.cri";

/**
 * Plugins the node does not use: storage drivers this kernel or layout
 * does not have, and /opt installation. CRI is off too unless a kubelet
 * runs (containerdConfig's `cri`).
 */
export const DISABLED_PLUGINS = [
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
] as const;

/**
 * containerd's config.toml (format version 2) for these paths. With `cri`
 * (a kubelet runs), the CRI plugin serves on the same socket: runc through
 * the v2 shim, overlayfs snapshots, cgroupfs (the kubelet's driver), CNI
 * configuration in the state directory. Without it, CRI is disabled.
 */
export function containerdConfig(paths: RuntimePaths, options: { cri?: boolean } = {}): string {
  const disabled = options.cri ? DISABLED_PLUGINS : [CRI_PLUGIN, ...DISABLED_PLUGINS];
  const cri = options.cri
    ? [
        `[plugins.${toml(CRI_PLUGIN)}]`,
        `  [plugins.${toml(CRI_PLUGIN)}.containerd]`,
        '    snapshotter = "overlayfs"',
        '    default_runtime_name = "runc"',
        `    [plugins.${toml(CRI_PLUGIN)}.containerd.runtimes.runc]`,
        '      runtime_type = "io.containerd.runc.v2"',
        `      [plugins.${toml(CRI_PLUGIN)}.containerd.runtimes.runc.options]`,
        "        SystemdCgroup = false",
        `        BinaryName = ${toml(runtimeBinaries(paths.prefix).runc)}`,
        `  [plugins.${toml(CRI_PLUGIN)}.cni]`,
        `    bin_dir = ${toml(`${paths.prefix}/usr/lib/cni`)}`,
        `    conf_dir = ${toml(join(paths.state, "cni"))}`,
        "",
      ]
    : [];
  return [
    "version = 2",
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
    ...cri,
  ].join("\n");
}
