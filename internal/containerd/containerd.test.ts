import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { systemTree, tempDir } from "../testing/mod.ts";
import {
  cniPaths,
  cniConflist,
  containerdConfig,
  CRI_IMAGES_PLUGIN,
  CRI_PLUGIN,
  CRI_RUNTIME_PLUGIN,
  SANDBOX_IMAGE_REF,
  DISABLED_PLUGINS,
  joinCgroup,
  killCgroup,
  parseContainerdLine,
  processesIn,
  RuntimePathError,
  runtimeBinaries,
  runtimeEnv,
  runtimePaths,
  unifiedCgroupRoot,
} from "./mod.ts";

describe("runtime paths and configuration", () => {
  test("root on the data partition, state and socket on tmpfs, one cgroup for everything", () => {
    const paths = runtimePaths("/data", "/ephemeral", "/sys/fs/cgroup", "nodecore-runtime", "/system");
    expect(paths).toEqual({
      prefix: "/system",
      root: "/data/containerd",
      state: "/ephemeral/containerd",
      socket: "/ephemeral/containerd/containerd.sock",
      registryHosts: "/ephemeral/containerd/registries",
      config: "/ephemeral/containerd/config.toml",
      cgroup: "/sys/fs/cgroup/nodecore-runtime",
      cgroupPath: "/nodecore-runtime",
    });
    expect(runtimeBinaries("/system")).toEqual({
      containerd: "/system/usr/bin/containerd",
      shim: "/system/usr/bin/containerd-shim-runc-v2",
      runc: "/system/usr/sbin/runc",
      ctr: "/system/usr/bin/ctr",
    });
    expect(runtimeEnv("/system")).toEqual({ PATH: "/system/usr/bin:/system/usr/sbin", SSL_CERT_FILE: "/system/usr/share/nodecore/ca-certificates.crt" });
    expect(runtimeEnv("")).toEqual({ PATH: "/usr/bin:/usr/sbin", SSL_CERT_FILE: "/usr/share/nodecore/ca-certificates.crt" });
  });

  test("refuses a socket path the kernel cannot bind, and a cgroup name that is a path", () => {
    expect(() => runtimePaths("/d", `/${"x".repeat(100)}`, "/sys/fs/cgroup", "r")).toThrow(RuntimePathError);
    expect(() => runtimePaths("/d", `/${"x".repeat(100)}`, "/sys/fs/cgroup", "r")).toThrow(/containerd socket path too long/);
    expect(() => runtimePaths("/d", "/e", "/sys/fs/cgroup", "../escape")).toThrow(/invalid runtime cgroup name/);
  });

  test("config.toml (golden)", () => {
    const config = containerdConfig(runtimePaths("/data", "/ephemeral", "/sys/fs/cgroup", "nodecore-runtime"));
    expect(config).toBe(
      [
        "version = 3",
        'root = "/data/containerd"',
        'state = "/ephemeral/containerd"',
        `disabled_plugins = [${[CRI_PLUGIN, CRI_RUNTIME_PLUGIN, CRI_IMAGES_PLUGIN, ...DISABLED_PLUGINS].map((p) => `"${p}"`).join(", ")}]`,
        "",
        "[grpc]",
        '  address = "/ephemeral/containerd/containerd.sock"',
        "",
        "[ttrpc]",
        '  address = "/ephemeral/containerd/containerd.sock.ttrpc"',
        "",
        '[plugins."io.containerd.snapshotter.v1.overlayfs"]',
        '  mount_options = ["volatile"]',
        "",
      ].join("\n"),
    );
  });

  test("config.toml with CRI, for a kubelet (golden tail)", () => {
    const config = containerdConfig(runtimePaths("/data", "/ephemeral", "/sys/fs/cgroup", "nodecore-runtime", "/system"), { cri: true });
    expect(config).toContain(`disabled_plugins = [${DISABLED_PLUGINS.map((p) => `"${p}"`).join(", ")}]`);
    expect(config.slice(config.indexOf("[plugins."))).toBe(
      [
        '[plugins."io.containerd.snapshotter.v1.overlayfs"]',
        '  mount_options = ["volatile"]',
        "",
        '[plugins."io.containerd.cri.v1.images"]',
        '  snapshotter = "overlayfs"',
        '  [plugins."io.containerd.cri.v1.images".pinned_images]',
        `    sandbox = "${SANDBOX_IMAGE_REF}"`,
        '  [plugins."io.containerd.cri.v1.images".registry]',
        '    config_path = "/ephemeral/containerd/registries"',
        "",
        '[plugins."io.containerd.cri.v1.runtime"]',
        "  enable_cdi = false",
        "  netns_mounts_under_state_dir = true",
        '  [plugins."io.containerd.cri.v1.runtime".containerd]',
        '    default_runtime_name = "runc"',
        '    [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]',
        '      runtime_type = "io.containerd.runc.v2"',
        '      [plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]',
        "        SystemdCgroup = false",
        '        BinaryName = "/system/usr/sbin/runc"',
        '  [plugins."io.containerd.cri.v1.runtime".cni]',
        '    bin_dirs = ["/system/usr/lib/cni"]',
        '    conf_dir = "/ephemeral/containerd/cni"',
        "    use_internal_loopback = true",
        "",
        '[plugins."io.containerd.grpc.v1.cri"]',
        "  disable_tcp_service = true",
        '  stream_server_address = "127.0.0.1"',
        '  stream_server_port = "0"',
        "",
      ].join("\n"),
    );
  });

  test("the CNI conflist: a bridge whose addresses come from the node's pod prefix", () => {
    const paths = runtimePaths("/data", "/ephemeral", "/sys/fs/cgroup", "nodecore-runtime", "/system");
    const network = JSON.parse(cniConflist(paths, "10.244.3.0/24"));
    expect(cniPaths(paths).conflist).toBe("/ephemeral/containerd/cni/10-nodecore.conflist");
    expect(network.plugins[0]).toMatchObject({ type: "bridge", bridge: "nodecore0", isGateway: true });
    expect(network.plugins[0].ipam).toEqual({
      type: "host-local",
      ranges: [[{ subnet: "10.244.3.0/24" }]],
      routes: [{ dst: "0.0.0.0/0" }],
      dataDir: "/ephemeral/containerd/cni-ipam",
    });
  });

  test("the built containerd accepts the configuration", async () => {
    const containerd = join(systemTree(), "usr", "bin", "containerd");
    using dir = tempDir("ctd");
    const paths = runtimePaths(join(dir.path, "data"), join(dir.path, "run"), "/sys/fs/cgroup", "t", systemTree());
    mkdirSync(paths.state, { recursive: true });
    for (const cri of [false, true]) {
      await Bun.write(paths.config, containerdConfig(paths, { cri }));
      const dumped = Bun.spawnSync([containerd, "--config", paths.config, "config", "dump"]);
      expect(dumped.stderr.toString()).not.toContain("level=error");
      expect(dumped.exitCode).toBe(0);
      const text = dumped.stdout.toString();
      expect(text).toContain(`root = '${paths.root}'`);
      expect(text).toContain(`address = '${paths.socket}'`);
      // containerd read the CRI settings (its dump shows them), or left CRI out.
      expect(text.includes(`conf_dir = '${cniPaths(paths).confDir}'`)).toBe(cri);
      expect(text.includes(`sandbox = '${SANDBOX_IMAGE_REF}'`)).toBe(cri);
      const disabled = text.split("disabled_plugins")[1]!.split("]")[0]!;
      expect(disabled.includes(CRI_PLUGIN)).toBe(!cri);
    }
  });
});

describe("parseContainerdLine", () => {
  test("logfmt lines become entries with level, message and fields", () => {
    expect(parseContainerdLine('time="2026-11-23T14:25:19Z" level=info msg="starting signal loop" namespace=nodecore pid=30604')).toEqual({
      level: "info",
      message: "starting signal loop",
      fields: { namespace: "nodecore", pid: "30604" },
    });
    expect(parseContainerdLine('time="x" level=warning msg="say \\"hi\\""')).toEqual({ level: "warn", message: 'say "hi"' });
    expect(parseContainerdLine('level=fatal msg="boom" error="no such file"')?.level).toBe("error");
  });

  test("other lines are left alone", () => {
    expect(parseContainerdLine("panic: something")).toBeUndefined();
    expect(parseContainerdLine('level=info nomsg="x"')).toBeUndefined();
    expect(parseContainerdLine('level=chatty msg="x"')).toBeUndefined();
  });
});

describe("the runtime's cgroup (the host's real cgroup v2 hierarchy)", () => {
  const root = unifiedCgroupRoot();

  test("a missing cgroup has nothing to kill", async () => {
    expect(await killCgroup("/sys/fs/cgroup/nodecore-test-never-made")).toBe(0);
  });

  test("killCgroup kills every process below it, nested cgroups included, and removes the cgroups", async () => {
    if (!root) throw new Error("no cgroup v2 hierarchy on this host");
    const cgroup = join(root, `nodecore-test-${process.pid}`);
    const children = [Bun.spawn(["sleep", "300"]), Bun.spawn(["sleep", "300"])];
    try {
      joinCgroup(join(cgroup, "containerd"), children[0]!.pid);
      joinCgroup(join(cgroup, "containers", "probe"), children[1]!.pid);
      expect(processesIn(cgroup).sort()).toEqual(children.map((c) => c.pid).sort());
      expect(readFileSync(join(cgroup, "cgroup.events"), "utf8")).toContain("populated 1");
      expect(await killCgroup(cgroup)).toBe(2);
      for (const child of children) expect(await child.exited).toBe(137);
      expect(existsSync(cgroup)).toBe(false);
    } finally {
      for (const child of children) child.kill("SIGKILL");
    }
  });
});
