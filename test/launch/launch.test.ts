// The launcher's parts that need no root, network namespace or qemu: what it
// writes for the node, how it names things, and how it reads consoles. (The
// qemu e2e test, test/e2e, exercises the rest.)

import { describe, expect, test } from "bun:test";
import { fromBinary } from "@bufbuild/protobuf";
import { createPrivateKey } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { validateParameters } from "../../internal/cluster/mod.ts";
import { tempDir } from "../../internal/testing/mod.ts";
import { bootMilestones } from "./boot_milestones.ts";
import { ClusterDir, ClusterDirError } from "./cluster_dir.ts";
import { dnsmasqArgs } from "./dhcp_server.ts";
import { nodeMac } from "./launcher.ts";
import { nodeAddress, subnetOf } from "./network_namespace.ts";
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

  test("dnsmasq serves only static leases on the bridge, with DNS off and no router or DNS server announced", () => {
    const args = dnsmasqArgs(subnetOf(0), { leaseFile: "/x/leases", logFile: "/x/log", leases: [{ mac: "52:54:00:77:00:01", address: "10.77.0.11", hostname: "node1" }] });
    expect(args).toContain("--interface=br0");
    expect(args).toContain("--bind-interfaces");
    expect(args).toContain("--port=0");
    expect(args).toContain("--conf-file=/dev/null");
    expect(args).toContain("--dhcp-leasefile=/x/leases");
    expect(args.some((a) => /^--dhcp-range=10\.77\.0\.0,static,/.test(a))).toBe(true);
    expect(args).toContain("--dhcp-host=52:54:00:77:00:01,10.77.0.11,node1,12h");
    expect(args).toContain("--dhcp-option=option:router");
    expect(args).toContain("--dhcp-option=option:dns-server");
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
});
