// The launcher's parts that need no root, network namespace or qemu: what it
// writes for the node, how it names things, how it reads consoles, and its
// command line. (The qemu e2e test, test/e2e, exercises the rest.)

import { describe, expect, test } from "bun:test";
import { fromBinary } from "@bufbuild/protobuf";
import { createPrivateKey } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { validateParameters } from "../../internal/cluster/mod.ts";
import { configPaths } from "../../internal/operator/mod.ts";
import { tempDir } from "../../internal/testing/mod.ts";
import { awaitedMilestone, bootMilestones, BOOT_MILESTONES, CONSOLE } from "./boot_milestones.ts";
import { ClusterDir, ClusterDirError } from "./cluster_dir.ts";
import { ctlWrapperScript } from "./ctl_wrapper.ts";
import { dnsmasqArgs } from "./dhcp_server.ts";
import { timeServerConfig } from "./time_server.ts";
import { nodeMac } from "./launcher.ts";
import { DEFAULT_NODES, DEFAULT_UP_TIMEOUT_S, MAX_NODES, MAX_PROCESS_NODES, parseLauncherArgs } from "./launcher_args.ts";
import { namespaceName, nodeAddress, subnetOf } from "./network_namespace.ts";
import { encodeNodeParameters, loadOrCreateOwnerKey, loadOrCreateStorageTestKey } from "./node_parameters.ts";
import { ConsoleWaitError, SerialConsole, type ConsoleLine } from "./serial_console.ts";

describe("node parameters", () => {
  test("bootstrap parameters from the launcher pass the node's own validation with the owner's public key", () => {
    using dir = tempDir();
    const owner = loadOrCreateOwnerKey(join(dir.path, "owner.key.pem"));
    const bytes = encodeNodeParameters({ kind: "bootstrap" }, owner)!;
    const valid = validateParameters(fromBinary(NodeParametersSchema, bytes), "test");
    expect(valid.kind).toBe("bootstrap");
    expect(valid.kind === "bootstrap" && [...valid.ownerPublicKey]).toEqual([...owner.publicKeyRaw]);
  });

  test("the owner key is created once, private to root, and read back unchanged", () => {
    using dir = tempDir();
    const path = join(dir.path, "owner.key.pem");
    const created = loadOrCreateOwnerKey(path);
    const again = loadOrCreateOwnerKey(path);
    expect([...again.publicKeyRaw]).toEqual([...created.publicKeyRaw]);
    expect(statSync(path).mode & 0o777).toBe(0o600);
    expect(createPrivateKey(readFileSync(path)).asymmetricKeyType).toBe("ed25519");
  });

  test("raw parameters are passed through untouched and 'none' writes nothing", () => {
    using dir = tempDir();
    const owner = loadOrCreateOwnerKey(join(dir.path, "owner.key.pem"));
    const bytes = new Uint8Array([1, 2, 3]);
    expect(encodeNodeParameters({ kind: "raw", bytes }, owner)).toBe(bytes);
    expect(encodeNodeParameters({ kind: "none" }, owner)).toBeUndefined();
  });

  test("a storage test key is 32 bytes and reused once it exists", () => {
    using dir = tempDir();
    const path = join(dir.path, "node1.storage-test-key");
    const key = loadOrCreateStorageTestKey(path);
    expect(key.length).toBe(32);
    expect([...loadOrCreateStorageTestKey(path)]).toEqual([...key]);
  });
});

describe("addressing", () => {
  test("node i always gets the same MAC and the address .10+i of the cluster subnet", () => {
    expect(nodeMac(0, 1)).toBe("52:54:00:77:00:01");
    expect(nodeMac(3, 12)).toBe("52:54:00:77:03:0c");
    expect(nodeAddress(subnetOf(0), 1)).toBe("10.77.0.11");
    expect(subnetOf(5).bridgeAddress).toBe("10.77.5.1");
    expect(() => subnetOf(256)).toThrow(RangeError);
  });

  test("dnsmasq serves only static leases on the bridge, no router, and DNS for its own zone only, announced as the network's server", () => {
    const args = dnsmasqArgs(subnetOf(0), { leaseFile: "/x/leases", logFile: "/x/log", leases: [{ mac: "52:54:00:77:00:01", address: "10.77.0.11", hostname: "node1" }] });
    expect(args).toContain("--interface=br0");
    expect(args).toContain("--bind-interfaces");
    expect(args).toContain("--listen-address=10.77.0.1");
    expect(args).toContain("--local=/lan.test/");
    expect(args).toContain("--host-record=gateway.lan.test,10.77.0.1");
    expect(args).toContain("--no-resolv");
    expect(args).toContain("--conf-file=/dev/null");
    expect(args).toContain("--dhcp-leasefile=/x/leases");
    expect(args.some((a) => /^--dhcp-range=10\.77\.0\.0,static,/.test(a))).toBe(true);
    expect(args).toContain("--dhcp-host=52:54:00:77:00:01,10.77.0.11,node1,12h");
    expect(args).toContain("--dhcp-option=option:router");
    expect(args).toContain("--dhcp-option=option:dns-server,10.77.0.1");
    expect(args.some((a) => a.includes("ntp-server"))).toBe(false);
    expect(dnsmasqArgs(subnetOf(0), { leaseFile: "/x/leases", logFile: "/x/log", leases: [], ntpServer: true })).toContain("--dhcp-option=option:ntp-server,10.77.0.1");
  });

  test("the network's time server serves the cluster's subnet on the bridge's address, but the addresses it is told to ignore", () => {
    const text = timeServerConfig({ address: "10.77.0.1", network: "10.77.0.0/24", deny: ["10.77.0.12"], confFile: "/x/c", pidFile: "/x/p", logFile: "/x/l" });
    expect(text).toBe("local stratum 8\ndeny 10.77.0.12\nallow 10.77.0.0/24\nbindaddress 10.77.0.1\nport 123\ncmdport 0\npidfile /x/p\n");
  });

  test("a cluster's network namespace has the same name at every launch", () => {
    expect(namespaceName("dev")).toBe("nodecore-dev");
    expect(namespaceName("dev")).toBe(namespaceName("dev"));
  });
});

describe("cluster directory", () => {
  test("a fresh launch empties a directory only if it carries the launcher's marker", () => {
    using dir = tempDir();
    const foreign = join(dir.path, "foreign");
    mkdirSync(foreign);
    writeFileSync(join(foreign, "precious.txt"), "keep me");
    expect(() => ClusterDir.open(foreign, { fresh: true })).toThrow(ClusterDirError);
    expect(existsSync(join(foreign, "precious.txt"))).toBe(true);

    const ours = ClusterDir.open(join(dir.path, "ours"), { fresh: true });
    writeFileSync(ours.node("node1").disk, "old disk");
    ours.release();
    const again = ClusterDir.open(ours.path, { fresh: true });
    expect(existsSync(again.node("node1").disk)).toBe(false);
    again.release();
  });

  test("the owner key lives in the ctl config directory, where ctl --config looks for it", () => {
    using dir = tempDir();
    const cluster = ClusterDir.open(join(dir.path, "dev"), { fresh: true });
    expect(cluster.ownerKey).toBe(configPaths(cluster.ctlConfig).ownerKey);
    expect(statSync(cluster.ctlConfig).mode & 0o777).toBe(0o700);
    expect(cluster.ctlWrapper).not.toBe(cluster.ctlConfig);
    cluster.release();
  });

  test("a kept directory from before owner/ keeps its owner key and credentials", () => {
    using dir = tempDir();
    const path = join(dir.path, "dev");
    mkdirSync(join(path, "ctl"), { recursive: true });
    writeFileSync(join(path, ".nodecore-cluster"), "");
    writeFileSync(join(path, "owner.key.pem"), "old key");
    writeFileSync(join(path, "ctl", "owner.crt"), "old certificate");
    const cluster = ClusterDir.open(path, { fresh: false });
    expect(readFileSync(cluster.ownerKey, "utf8")).toBe("old key");
    expect(readFileSync(join(cluster.ctlConfig, "owner.crt"), "utf8")).toBe("old certificate");
    expect(existsSync(cluster.ctlWrapper)).toBe(false);
    cluster.release();
  });

  test("a directory held by a live launcher is refused", () => {
    using dir = tempDir();
    const path = join(dir.path, "held");
    mkdirSync(path);
    writeFileSync(join(path, "launcher.pid"), `${process.ppid}\n`);
    expect(() => ClusterDir.open(path, { fresh: false })).toThrow(/in use by launcher pid/);
  });
});

function lines(...texts: [number, string][]): ConsoleLine[] {
  return texts.map(([ms, text]) => ({ ms, at: new Date(), text }));
}

describe("consoles", () => {
  test("boot milestones are the host receive times of the node's console lines", () => {
    const milestones = bootMilestones(
      lines(
        [7_900, "[    6.25] Run /init as init process"],
        [15_200, "00:28:05.222 I root pseudo file systems mounted"],
        [17_200, "00:28:08.009 I root kernel modules loaded count=29 ms=2171"],
        [22_100, "00:28:12.860 I root.enrolment data partition formatted and mounted mountpoint=/data formattedAt=2026-11-22T00:24:16.412Z"],
      ),
    );
    const byName = Object.fromEntries(milestones.map((m) => [m.name, m.ms]));
    expect(byName["kernel runs /init"]).toBe(7_900);
    expect(byName["first init log line"]).toBe(15_200);
    expect(byName["kernel modules loaded"]).toBe(17_200);
    expect(byName["storage mounted"]).toBe(22_100);
    expect(byName["node is UP"]).toBeUndefined();
  });

  test("a console wait sees earlier lines, and fails with the console's tail when the console ends first", async () => {
    using dir = tempDir();
    const serial = new SerialConsole("node1", join(dir.path, "node1.console.log"), false);
    const encoder = new TextEncoder();
    await serial.pump(
      new ReadableStream({
        start(controller) {
          controller.enqueue(encoder.encode("first line\r\nsecond "));
          controller.enqueue(encoder.encode("line\n"));
          controller.close();
        },
      }),
    );
    expect((await serial.waitFor(/second line/, { timeoutMs: 1_000 })).text).toBe("second line");
    const waiting = serial.waitFor(/never/, { timeoutMs: 10_000 });
    serial.end("qemu exited (guest-panic)");
    await expect(waiting).rejects.toThrow(ConsoleWaitError);
    await expect(serial.waitFor(/never/, { timeoutMs: 10_000 })).rejects.toThrow(/qemu exited \(guest-panic\).*second line/s);
    expect(readFileSync(join(dir.path, "node1.console.log"), "utf8")).toBe("first line\nsecond line\n");
  });

  test("a failed wait names the milestone it waited for, not its pattern", async () => {
    using dir = tempDir();
    const serial = new SerialConsole("node2", join(dir.path, "node2.console.log"), false);
    const up = serial.waitFor(CONSOLE.nodeUp, { timeoutMs: 10_000, awaited: `node2 ${awaitedMilestone(CONSOLE.nodeUp)}` });
    serial.end("qemu exited (signal SIGKILL)");
    const error = await up.catch((err: Error) => err);
    expect(error).toBeInstanceOf(ConsoleWaitError);
    expect((error as Error).message).toStartWith("node2: qemu exited (signal SIGKILL) while waiting for node2 to be UP;");
    expect((error as Error).message).not.toContain(CONSOLE.nodeUp.source);
  });

  test("every console pattern has a milestone phrase for waiting messages", () => {
    for (const pattern of [...Object.values(CONSOLE), ...BOOT_MILESTONES.map((m) => m.pattern)]) {
      const phrase = awaitedMilestone(pattern);
      expect(phrase).toStartWith("to ");
      expect(phrase).not.toContain(pattern.source);
    }
  });
});

describe("ctl wrapper", () => {
  test("runs out/ctl in the cluster's namespace with its config directory, and no --owner-key", () => {
    const script = ctlWrapperScript({ cluster: "dev", namespace: "nodecore-dev", config: "/repo/out/cluster/dev/owner", ctl: "/repo/out/ctl" });
    expect(script).toStartWith("#!/bin/sh\n");
    expect(script).toContain(`exec ip netns exec 'nodecore-dev' '/repo/out/ctl' --config '/repo/out/cluster/dev/owner' "$@"`);
    expect(script).not.toContain("--owner-key");
    expect(script).toContain("cluster dev is not running");
  });

  test("quotes paths for sh, and sh accepts the script", () => {
    using dir = tempDir();
    const script = ctlWrapperScript({ cluster: "dev", namespace: "nodecore-dev", config: "/it's here/owner", ctl: "/repo/out/ctl" });
    expect(script).toContain(`--config '/it'\\''s here/owner'`);
    const path = join(dir.path, "ctl");
    writeFileSync(path, script);
    expect(Bun.spawnSync(["sh", "-n", path]).exitCode).toBe(0);
  });
});

describe("launcher arguments", () => {
  test("no arguments launch the default cluster: three quiet nodes, built first", () => {
    expect(parseLauncherArgs([])).toEqual({
      kind: "launch",
      options: {
        nodes: DEFAULT_NODES,
        processes: false,
        name: "dev",
        verbose: false,
        keep: false,
        timeoutMs: DEFAULT_UP_TIMEOUT_S * 1000,
        memoryMiB: undefined,
        cpus: undefined,
        accel: undefined,
        build: true,
        imageDir: undefined,
        kubernetesDir: undefined,
      },
    });
  });

  test("every option is read, as '--option value' or '--option=value'", () => {
    const parsed = parseLauncherArgs([
      "--nodes",
      "1",
      "--name=e2e",
      "--verbose",
      "--keep",
      "--timeout=60",
      "--memory",
      "2048",
      "--cpus",
      "1",
      "--accel",
      "tcg",
      "--no-build",
      "--image-dir",
      "/images",
    ]);
    expect(parsed).toEqual({
      kind: "launch",
      options: {
        nodes: 1,
        processes: false,
        name: "e2e",
        verbose: true,
        keep: true,
        timeoutMs: 60_000,
        memoryMiB: 2048,
        cpus: 1,
        accel: "tcg",
        build: false,
        imageDir: "/images",
        kubernetesDir: undefined,
      },
    });
    expect(parseLauncherArgs(["--kubernetes", "/opt/k8s"])).toMatchObject({ kind: "launch", options: { kubernetesDir: "/opt/k8s", build: true } });
    expect(parseLauncherArgs(["--kubernetes=/opt/k8s", "--no-build"])).toEqual({
      kind: "error",
      message: "--kubernetes builds the binaries into the image; it needs a build (drop --no-build)",
    });
  });

  test("--processes launches node processes, up to MAX_PROCESS_NODES, without the VM-only options", () => {
    const parsed = parseLauncherArgs(["--processes", "--nodes", "50", "--name", "many"]);
    expect(parsed).toEqual({
      kind: "launch",
      options: {
        nodes: 50,
        processes: true,
        name: "many",
        verbose: false,
        keep: false,
        timeoutMs: DEFAULT_UP_TIMEOUT_S * 1000,
        memoryMiB: undefined,
        cpus: undefined,
        accel: undefined,
        build: true,
        imageDir: undefined,
        kubernetesDir: undefined,
      },
    });
    const message = (argv: string[]) => {
      const result = parseLauncherArgs(argv);
      return result.kind === "error" ? result.message : `accepted: ${JSON.stringify(result)}`;
    };
    expect(message(["--processes", "--nodes", String(MAX_PROCESS_NODES + 1)])).toBe(
      `--nodes must be a whole number from 1 to ${MAX_NODES} (up to ${MAX_PROCESS_NODES} with --processes), got '${MAX_PROCESS_NODES + 1}'`,
    );
    expect(message(["--nodes", "50"])).toBe(`--nodes must be a whole number from 1 to ${MAX_NODES} (up to ${MAX_PROCESS_NODES} with --processes), got '50'`);
    expect(message(["--processes", "--memory", "2048"])).toBe("--memory is for VMs; node processes do without it (drop it, or drop --processes)");
    expect(message(["--processes", "--keep"])).toBe("--keep is for VMs; node processes do without it (drop it, or drop --processes)");
  });

  test("--help and -h ask for the usage", () => {
    expect(parseLauncherArgs(["--help"]).kind).toBe("help");
    expect(parseLauncherArgs(["--nodes", "2", "-h"]).kind).toBe("help");
  });

  test("each mistake is one line naming the option and what is wrong with it", () => {
    const message = (argv: string[]) => {
      const parsed = parseLauncherArgs(argv);
      return parsed.kind === "error" ? parsed.message : `accepted: ${JSON.stringify(parsed)}`;
    };
    expect(message(["--nodes", "-1"])).toBe(`--nodes must be a whole number from 1 to ${MAX_NODES} (up to ${MAX_PROCESS_NODES} with --processes), got '-1'`);
    expect(message(["--nodes"])).toBe("--nodes needs a value (see --help)");
    expect(message(["--nodes", "--verbose"])).toBe("--nodes needs a value (see --help)");
    expect(message(["--nodez", "3"])).toBe("unknown option '--nodez' (see --help)");
    expect(message(["--nodes", "abc"])).toContain("got 'abc'");
    expect(message(["--nodes", "0"])).toContain("got '0'");
    expect(message(["--nodes", "100"])).toContain("got '100'");
    expect(message(["--nodes", "2.5"])).toContain("got '2.5'");
    expect(message(["--name", "Dev"])).toStartWith("--name must be");
    expect(message(["--verbose=yes"])).toBe("--verbose takes no value, got '--verbose=yes'");
    expect(message(["3"])).toStartWith("unexpected argument '3'");
    expect(message(["--timeout", "1e9"])).toStartWith("--timeout must be a whole number");
    expect(message(["--accel", "hvf"])).toBe("--accel must be one of kvm, tcg, got 'hvf'");
    expect(message(["--processes", "--accel", "kvm"])).toBe("--accel is for VMs; node processes do without it (drop it, or drop --processes)");
  });
});

/**
 * Bad argument lists for `bun run cluster`. Each run gets --no-build and an
 * image directory that does not exist first, so that a list the launcher
 * wrongly accepted fails with exit 1 instead of launching a cluster.
 */
const BAD_ARGUMENT_LISTS: readonly string[][] = [
  ["--nodes", "-1"],
  ["--nodes"],
  ["--nodez"],
  ["--nodes", "abc"],
  ["--nodes", "0"],
  ["--nodes", "100"],
  ["--nodes", ""],
  ["--nodes="],
  ["--nodes", "--verbose"],
  ["--name"],
  ["--name", "no/slashes"],
  ["--timeout", "-5"],
  ["--memory", "lots"],
  ["--image-dir"],
  ["--verbose=1"],
  ["-n", "3"],
  ["node", "list"],
];
const LAUNCHER = join(import.meta.dir, "cluster.ts");

describe("the launcher's command line", () => {
  for (const argv of BAD_ARGUMENT_LISTS) {
    test(`bun run cluster ${argv.map((a) => JSON.stringify(a)).join(" ")} exits 2 with a one-line error and no stack`, async () => {
      const child = Bun.spawn([process.execPath, LAUNCHER, "--no-build", "--image-dir", "/nonexistent", ...argv], { stdin: "ignore", stdout: "pipe", stderr: "pipe" });
      const [exitCode, stdout, stderr] = await Promise.all([child.exited, new Response(child.stdout).text(), new Response(child.stderr).text()]);
      expect({ exitCode, stdout }).toEqual({ exitCode: 2, stdout: "" });
      expect(stderr).toMatch(/^cluster: [^\n]+\n$/);
      expect(stderr).not.toMatch(/TypeError|\bat \S+:\d+/);
    });
  }
});
