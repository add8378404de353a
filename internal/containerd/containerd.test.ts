import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import {
  containerdConfig,
  CRI_PLUGIN,
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
    expect(runtimeEnv("/system")).toEqual({ PATH: "/system/usr/bin:/system/usr/sbin" });
    expect(runtimeEnv("")).toEqual({ PATH: "/usr/bin:/usr/sbin" });
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
        "version = 2",
        'root = "/data/containerd"',
        'state = "/ephemeral/containerd"',
        `disabled_plugins = [${[CRI_PLUGIN, ...DISABLED_PLUGINS].map((p) => `"${p}"`).join(", ")}]`,
        "",
        "[grpc]",
        '  address = "/ephemeral/containerd/containerd.sock"',
        "",
        "[ttrpc]",
        '  address = "/ephemeral/containerd/containerd.sock.ttrpc"',
        "",
      ].join("\n"),
    );
    expect(CRI_PLUGIN).toBe("io.containerd.grpc.v1.cri");
  });

  test("config.toml with CRI, for a kubelet (golden tail)", () => {
    const config = containerdConfig(runtimePaths("/data", "/ephemeral", "/sys/fs/cgroup", "nodecore-runtime", "/system"), { cri: true });
    expect(config).toContain(`disabled_plugins = [${DISABLED_PLUGINS.map((p) => `"${p}"`).join(", ")}]`);
    expect(config).not.toContain(`"${CRI_PLUGIN}",`);
    expect(config.slice(config.indexOf("[plugins."))).toBe(
      [
        '[plugins."io.containerd.grpc.v1.cri"]',
        '  [plugins."io.containerd.grpc.v1.cri".containerd]',
        '    snapshotter = "overlayfs"',
        '    default_runtime_name = "runc"',
        '    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]',
        '      runtime_type = "io.containerd.runc.v2"',
        '      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]',
        "        SystemdCgroup = false",
        '        BinaryName = "/system/usr/sbin/runc"',
        '  [plugins."io.containerd.grpc.v1.cri".cni]',
        '    bin_dir = "/system/usr/lib/cni"',
        '    conf_dir = "/ephemeral/containerd/cni"',
        "",
      ].join("\n"),
    );
  });

  test("the host's containerd accepts the configuration", async () => {
    if (!existsSync("/usr/bin/containerd")) throw new Error("containerd is not installed (test/setup.sh installs Debian's containerd)");
    using dir = tempDir("ctd");
    const paths = runtimePaths(join(dir.path, "data"), join(dir.path, "run"), "/sys/fs/cgroup", "t");
    mkdirSync(paths.state, { recursive: true });
    for (const cri of [false, true]) {
      await Bun.write(paths.config, containerdConfig(paths, { cri }));
      const dumped = Bun.spawnSync(["/usr/bin/containerd", "--config", paths.config, "config", "dump"]);
      expect(dumped.exitCode).toBe(0);
      const text = dumped.stdout.toString();
      expect(text).toContain(`root = "${paths.root}"`);
      expect(text).toContain(`address = "${paths.socket}"`);
      // containerd read the CRI settings (its dump shows them), or left CRI out.
      expect(text.includes(`conf_dir = "${join(paths.state, "cni")}"`)).toBe(cri);
      expect(text.includes(`"${CRI_PLUGIN}"`) && text.split("disabled_plugins")[1]!.split("\n")[0]!.includes(CRI_PLUGIN)).toBe(!cri);
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
