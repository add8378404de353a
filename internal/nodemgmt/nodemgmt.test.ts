// The node management service over real mutual TLS on loopback, with a real
// log tree; the supervision tree and the power path are stand-ins that
// record what they were asked.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { LogLevel, NodeManagement, UpdatePhase } from "../../proto/gen/api/node_management_pb.ts";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { connect, createServer as createTcpServer, type AddressInfo, type Socket } from "node:net";
import { storageLayout } from "../localstorage/mod.ts";
import { BUNDLE_CHUNK_BYTES, BUNDLE_FILES, NODE_ARCH, readBootRecord, slotControl, type BundleManifest } from "../update/mod.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { LogTree } from "../logtree/mod.ts";
import { generateKeyPair, selfSignedCertificate } from "../pki/mod.ts";
import { Status, channelCredentials, channelOptions, createClient } from "../rpc/mod.ts";
import { refusal } from "../curator/test_cluster.ts";
import { supervise, type Supervisor } from "../supervisor/mod.ts";
import { eventually, freePort, tempDir, testCA, testMembership, testNode, testOwner } from "../testing/mod.ts";
import { answerProblems, callEveryMethod, hostileRounds } from "../testing/unicode.ts";
import { dialNodeManagement } from "./client/mod.ts";
import { MAX_BACKLOG, nodeManagementRunnable, type PowerRequest } from "./mod.ts";

const ca = testCA();
/** The node whose management service is under test. */
const thisNode = testNode(ca);
const nodeId = thisNode.id;
const owner = testOwner(ca).tls;
// A port the system says is free (a fixed one can be any other socket's).
const port = await freePort();

const logs = new LogTree();
const powered: string[] = [];
let supervisor: Supervisor;

beforeAll(async () => {
  const membership = new Value<ClusterMembership>();
  membership.set(testMembership(thisNode));
  const { logger } = captureLogger("root");
  supervisor = supervise(
    nodeManagementRunnable({
      membership,
      port,
      logs,
      services: () => [
        { path: "root", state: "healthy", restarts: 0, sinceMs: 1_000, backoffMs: 500 },
        { path: "root.roleserve.controlplane.consensus", state: "dead", restarts: 3, lastError: "etcd exited with code 1", sinceMs: 250, backoffMs: 1_125 },
      ],
      power: (action: PowerRequest, why: string) => powered.push(`${action}: ${why}`),
    }),
    { logger },
  );
  await eventually(() => expect(supervisor.dump()[0]!.state).toBe("healthy"));
});

afterAll(async () => {
  await supervisor.stop();
});

const client = () => dialNodeManagement(nodeId, "127.0.0.1", owner, port);

async function collect(iterable: AsyncIterable<{ entries: { path: string; message: string; level: LogLevel }[] }>, limit = Number.POSITIVE_INFINITY) {
  const out: { path: string; message: string; level: LogLevel }[] = [];
  for await (const response of iterable) {
    out.push(...response.entries);
    if (out.length >= limit) break;
  }
  return out;
}

describe("logs", () => {
  test("a backlog of one runnable, of a subtree, and above a level", async () => {
    logs.append({ time: new Date(), level: "info", path: "root.roleserve", message: "role server starting" });
    logs.append({ time: new Date(), level: "debug", path: "root.roleserve.controlplane", message: "checking roles" });
    logs.append({ time: new Date(), level: "warn", path: "root.roleserve.controlplane.consensus.output", message: "etcd: slow fdatasync" });
    logs.append({ time: new Date(), level: "info", path: "kernel", message: "virtio_net virtio0 eth0: renamed" });
    const c = client();
    expect((await collect(c.getLogs({ path: "root.roleserve", backlog: -1 }))).map((e) => e.message)).toEqual(["role server starting"]);
    expect((await collect(c.getLogs({ path: "root.roleserve", subtree: true, backlog: -1 }))).map((e) => e.message)).toEqual(["role server starting", "checking roles", "etcd: slow fdatasync"]);
    const warnings = await collect(c.getLogs({ path: "root", subtree: true, backlog: -1, minLevel: LogLevel.WARN }));
    expect(warnings.map((e) => [e.path, e.level])).toEqual([["root.roleserve.controlplane.consensus.output", LogLevel.WARN]]);
    expect((await collect(c.getLogs({ path: "kernel", backlog: 1 }))).map((e) => e.message)).toEqual(["virtio_net virtio0 eth0: renamed"]);
    expect((await collect(c.getLogs({ backlog: 2 }))).map((e) => e.path)).toEqual(["root.roleserve.controlplane.consensus.output", "kernel"]);
    c.close();
  });

  test("a follower gets the backlog, then new lines as they are written, once each", async () => {
    const c = client();
    const controller = new AbortController();
    const seen: string[] = [];
    const following = (async () => {
      for await (const response of c.getLogs({ path: "root.follow", subtree: true, backlog: -1, follow: true }, { signal: controller.signal })) {
        seen.push(...response.entries.map((e) => e.message));
      }
    })().catch(() => {});
    logs.append({ time: new Date(), level: "info", path: "root.follow", message: "first" });
    await eventually(() => expect(seen).toEqual(["first"]));
    logs.append({ time: new Date(), level: "info", path: "root.follow.child", message: "second" });
    logs.append({ time: new Date(), level: "info", path: "root.elsewhere", message: "not for this follower" });
    await eventually(() => expect(seen).toEqual(["first", "second"]));
    controller.abort();
    await following;
    c.close();
  });

  test("bad requests are refused with what is wrong", async () => {
    const c = client();
    const badPath = await refusal(collect(c.getLogs({ path: "root..x", backlog: 1 })));
    expect(badPath.code).toBe(Status.INVALID_ARGUMENT);
    expect(badPath.details).toBe("path: 'root..x' is not a dotted path like root.roleserve.controlplane");
    const badBacklog = await refusal(collect(c.getLogs({ backlog: MAX_BACKLOG + 1 })));
    expect(badBacklog.code).toBe(Status.INVALID_ARGUMENT);
    const badLevel = await refusal(collect(c.getLogs({ backlog: 1, minLevel: 42 as LogLevel })));
    expect(badLevel.code).toBe(Status.INVALID_ARGUMENT);
    c.close();
  });
});

describe("services and power", () => {
  test("the supervision tree as a table", async () => {
    const c = client();
    const { services } = await c.getServices({});
    c.close();
    expect(services.map((s) => [s.path, s.state, s.restarts, s.lastError])).toEqual([
      ["root", "healthy", 0, ""],
      ["root.roleserve.controlplane.consensus", "dead", 3, "etcd exited with code 1"],
    ]);
    expect(Number(services[1]!.sinceMs)).toBe(250);
  });

  test("reboot and power-off are answered, then carried out", async () => {
    const c = client();
    await c.reboot({});
    await c.powerOff({});
    c.close();
    await eventually(() => expect(powered).toEqual(["reboot: owner asked through NodeManagement.Reboot", "poweroff: owner asked through NodeManagement.PowerOff"]));
  });
});

describe("updates", () => {
  /** A node booted from slot a whose other slot is a file, serving node management on a port of its own. */
  async function slottedNode() {
    const dir = tempDir("nodecore-nodemgmt-update-");
    const layout = storageLayout(dir.path);
    mkdirSync(layout.esp.slot("a").dir, { recursive: true });
    mkdirSync(layout.data.path, { recursive: true });
    writeFileSync(layout.esp.boot, "active=a\n");
    const systemB = join(dir.path, "system-b");
    writeFileSync(systemB, new Uint8Array(4 << 20));
    const systemA = join(dir.path, "system-a");
    writeFileSync(systemA, new Uint8Array(4 << 20));
    const membership = new Value<ClusterMembership>();
    membership.set(testMembership(thisNode));
    const slotPort = await freePort();
    const reboots: string[] = [];
    const { logger } = captureLogger("root");
    const served = supervise(
      nodeManagementRunnable({
        membership,
        port: slotPort,
        logs,
        services: () => [],
        power: (action, why) => reboots.push(`${action}: ${why}`),
        slots: slotControl(layout, { slot: "a", trial: false, system: undefined, systemError: undefined }, "0.1.0", { target: { path: systemB, bytes: 4 << 20 }, booted: systemA }),
      }),
      { logger },
    );
    await eventually(() => expect(served.dump()[0]!.state).toBe("healthy"));
    const contents = Object.fromEntries(BUNDLE_FILES.map((name) => [name, crypto.getRandomValues(new Uint8Array(name === "system" ? 3_000_000 : 700_000))])) as Record<
      (typeof BUNDLE_FILES)[number],
      Uint8Array
    >;
    const manifest: BundleManifest = {
      format: 1,
      version: "0.2.0",
      arch: NODE_ARCH,
      files: Object.fromEntries(
        BUNDLE_FILES.map((name) => [name, { bytes: contents[name].length, sha256: new Bun.CryptoHasher("sha256").update(contents[name]).digest("hex") }]),
      ) as BundleManifest["files"],
    };
    manifest.files.version.bytes = 6;
    contents.version = Buffer.from("0.2.0\n");
    manifest.files.version.sha256 = new Bun.CryptoHasher("sha256").update(contents.version).digest("hex");
    manifest.files.cmdline.bytes = 4;
    contents.cmdline = Buffer.from("x=1\n");
    manifest.files.cmdline.sha256 = new Bun.CryptoHasher("sha256").update(contents.cmdline).digest("hex");
    const requests = async function* (text = JSON.stringify(manifest), data = Buffer.concat(BUNDLE_FILES.map((n) => contents[n])), activate = false) {
      yield { bundleManifest: text, activate };
      for (let i = 0; i < data.length; i += 256 * 1024) yield { data: data.subarray(i, i + 256 * 1024) };
    };
    return {
      dir,
      layout,
      systemA,
      contents,
      manifest,
      reboots,
      requests,
      port: slotPort,
      client: () => dialNodeManagement(nodeId, "127.0.0.1", owner, slotPort),
      [Symbol.asyncDispose]: async () => {
        await served.stop();
        dir[Symbol.dispose]();
      },
    };
  }

  test("a bundle streamed by the owner is written to the other slot, with progress, and activated on request", async () => {
    await using node = await slottedNode();
    const c = node.client();
    const phases: [UpdatePhase, number][] = [];
    for await (const answer of c.update(node.requests(undefined, undefined, true))) phases.push([answer.phase, Number(answer.writtenBytes)]);
    c.close();
    expect(phases[0]).toEqual([UpdatePhase.WRITING, 0]);
    expect(phases.at(-2)?.[0]).toBe(UpdatePhase.INSTALLED);
    expect(phases.at(-1)?.[0]).toBe(UpdatePhase.REBOOTING);
    expect(readFileSync(node.layout.esp.slot("b").kernel).equals(node.contents.kernel)).toBe(true);
    expect(readBootRecord(node.layout)).toEqual({ active: "a", next: "b" });
    await eventually(() => expect(node.reboots).toEqual(["reboot: owner updated slot b to 0.2.0 through NodeManagement.Update and activated it"]));
  });

  test("a system image the booted slot runs as well is copied on the node, and the owner sends only the files it asks for", async () => {
    await using node = await slottedNode();
    const booted = readFileSync(node.systemA);
    booted.set(node.contents.system);
    writeFileSync(node.systemA, booted);
    const c = node.client();
    let ask: (files: string[]) => void = () => {};
    const asked = new Promise<string[]>((resolve) => (ask = resolve));
    async function* requests() {
      yield { bundleManifest: JSON.stringify(node.manifest) };
      for (const name of await asked) yield { data: node.contents[name as (typeof BUNDLE_FILES)[number]] };
    }
    const phases: UpdatePhase[] = [];
    for await (const answer of c.update(requests())) {
      phases.push(answer.phase);
      if (answer.phase === UpdatePhase.RECEIVING) ask(answer.sendFiles);
    }
    c.close();
    expect(await asked).toEqual(["kernel", "initramfs", "version", "cmdline"]);
    expect(phases.filter((p) => p === UpdatePhase.RECEIVING)).toHaveLength(1);
    expect(phases.at(-1)).toBe(UpdatePhase.INSTALLED);
    expect(readBootRecord(node.layout)).toEqual({ active: "a", next: "b" });
  });

  test("of an initramfs whose chunks the bundle lists, the owner sends only what follows the MiBs the booted slot has alike", async () => {
    await using node = await slottedNode();
    // A 2.5 MiB initramfs; slot a's has its first MiB, then other bytes.
    const initramfs = crypto.getRandomValues(new Uint8Array(2_621_440));
    const chunks = [0, 1, 2].map((i) => new Bun.CryptoHasher("sha256").update(initramfs.subarray(i * BUNDLE_CHUNK_BYTES, (i + 1) * BUNDLE_CHUNK_BYTES)).digest("hex"));
    node.contents.initramfs = initramfs;
    node.manifest.files.initramfs = { bytes: initramfs.length, sha256: new Bun.CryptoHasher("sha256").update(initramfs).digest("hex"), chunks };
    const booted = new Uint8Array(initramfs.length);
    booted.set(initramfs.subarray(0, BUNDLE_CHUNK_BYTES));
    writeFileSync(node.layout.esp.slot("a").initramfs, booted);
    const c = node.client();
    let ask: (answer: { files: string[]; from: Record<string, bigint> }) => void = () => {};
    const asked = new Promise<{ files: string[]; from: Record<string, bigint> }>((resolve) => (ask = resolve));
    async function* requests() {
      yield { bundleManifest: JSON.stringify(node.manifest) };
      const { files, from } = await asked;
      for (const name of files) {
        const data = node.contents[name as (typeof BUNDLE_FILES)[number]].subarray(Number(from[name] ?? 0n));
        for (let i = 0; i < data.length; i += 256 * 1024) yield { data: data.subarray(i, i + 256 * 1024) };
      }
    }
    let last = UpdatePhase.UNSPECIFIED;
    for await (const answer of c.update(requests())) {
      last = answer.phase;
      if (answer.phase === UpdatePhase.RECEIVING) ask({ files: answer.sendFiles, from: answer.sendFrom });
    }
    c.close();
    expect(await asked).toEqual({ files: [...BUNDLE_FILES], from: { initramfs: BigInt(BUNDLE_CHUNK_BYTES) } });
    expect(last).toBe(UpdatePhase.INSTALLED);
    expect(readFileSync(node.layout.esp.slot("b").initramfs).equals(initramfs)).toBe(true);
  });

  test("an update to a node that loses its power mid-stream ends, UNAVAILABLE, instead of waiting out its deadline", async () => {
    await using node = await slottedNode();
    // Between the owner and the node: a line that goes silent, as a VM whose power is pulled does (no reset, no answer).
    let silent = false;
    const sockets = new Set<Socket>();
    const line = createTcpServer((client) => {
      const upstream = connect(node.port, "127.0.0.1");
      for (const [from, to] of [
        [client, upstream],
        [upstream, client],
      ] as const) {
        sockets.add(from);
        from.on("data", (data) => silent || to.write(data));
        from.on("error", () => {});
      }
    });
    await new Promise<void>((resolve) => line.listen(0, "127.0.0.1", resolve));
    const c = dialNodeManagement(nodeId, "127.0.0.1", owner, (line.address() as AddressInfo).port, { timeMs: 500, timeoutMs: 1_000 });
    try {
      const failure = await refusal(
        (async () => {
          for await (const answer of c.update(node.requests())) if (answer.phase === UpdatePhase.WRITING) silent = true;
        })(),
      );
      expect(failure.code).toBe(Status.UNAVAILABLE);
    } finally {
      c.close();
      line.close();
      for (const socket of sockets) socket.destroy();
    }
  });

  test("a damaged or mis-described bundle is refused, saying why, and the node is not rebooted", async () => {
    await using node = await slottedNode();
    const c = node.client();
    const run = async (requests: AsyncIterable<{ bundleManifest?: string; data?: Uint8Array }>) => {
      for await (const _ of c.update(requests)) {
        // progress
      }
    };
    const damaged = Buffer.concat(BUNDLE_FILES.map((n) => node.contents[n]));
    damaged[10]! ^= 1;
    const bad = await refusal(run(node.requests(undefined, damaged, true)));
    expect(bad.code).toBe(Status.INVALID_ARGUMENT);
    expect(bad.details).toMatch(/^the bundle's system does not match its sha256 .*: it was changed or damaged$/);
    const notJson = await refusal(run(node.requests("{\u001b[2J")));
    expect([notJson.code, notJson.details]).toEqual([Status.INVALID_ARGUMENT, "bundle.json is not JSON"]);
    const empty = await refusal(run(node.requests(JSON.stringify({ format: 1, version: "0.2.0", arch: NODE_ARCH, files: {} }))));
    expect([empty.code, empty.details]).toEqual([Status.INVALID_ARGUMENT, "bundle.json lists no system"]);
    const older = await refusal(run(node.requests(JSON.stringify({ ...JSON.parse(JSON.stringify(node.manifest)), version: "0.0.1" }))));
    expect([older.code, older.details]).toEqual([Status.FAILED_PRECONDITION, "the bundle's version 0.0.1 is older than this node's 0.1.0 (allow a downgrade to install it)"]);
    c.close();
    expect(readBootRecord(node.layout)).toEqual({ active: "a", next: undefined });
    expect(node.reboots).toEqual([]);
  });

  test("a node without slots (a node process) says so", async () => {
    const c = client();
    const err = await refusal(
      (async () => {
        for await (const _ of c.update((async function* () {})())) {
          // nothing
        }
      })(),
    );
    c.close();
    expect([err.code, err.details]).toEqual([Status.FAILED_PRECONDITION, "this node has no system slots to update (a node process runs from its host's files)"]);
  });
});

describe("who may call", () => {
  test("a node certificate gets nothing, not even logs", async () => {
    const asNode = createClient(NodeManagement, `127.0.0.1:${port}`, {
      credentials: channelCredentials({ server: { ca: ca.certificate, verify: () => undefined }, certificate: thisNode.certificate, privateKey: thisNode.key.privateKey }),
      channelOptions: channelOptions(nodeId),
    });
    const err = await refusal(asNode.powerOff({}));
    expect(err.code).toBe(Status.PERMISSION_DENIED);
    expect(err.details).toBe("only the cluster owner may call this");
    const logsErr = await refusal(collect(asNode.getLogs({ backlog: 1 })));
    expect(logsErr.code).toBe(Status.PERMISSION_DENIED);
    asNode.close();
  });

  test("the owner's client refuses a node that is not the one it asked for", async () => {
    const wrong = dialNodeManagement(testNode(ca).id, "127.0.0.1", owner, port);
    const err = await refusal(wrong.getServices({}, { timeoutMs: 5_000 }));
    wrong.close();
    expect(err.code).toBe(Status.UNAVAILABLE);
    expect(err.details).toContain(`but ${nodeId} answered`);
    expect(powered.length).toBe(2);
  });
});

describe("hostile text", () => {
  test("in every string field of every method, from the owner and from strangers: each call ends with a printable status", async () => {
    const stranger = generateKeyPair();
    const callers = {
      owner: client(),
      "a self-signed stranger": createClient(NodeManagement, `127.0.0.1:${port}`, {
        credentials: channelCredentials({ server: { ca: ca.certificate, verify: () => undefined }, certificate: selfSignedCertificate(stranger), privateKey: stranger.privateKey }),
        channelOptions: channelOptions(nodeId),
      }),
    };
    const refusedPaths: string[] = [];
    for (const [who, c] of Object.entries(callers)) {
      for (const text of hostileRounds(7)) {
        const outcomes = await callEveryMethod(NodeManagement, c, text);
        expect(answerProblems(outcomes, who, who === "owner" ? undefined : Status.UNAUTHENTICATED)).toEqual([]);
        for (const o of outcomes) if (o.method === "NodeManagement/GetLogs" && o.result === Status.INVALID_ARGUMENT) refusedPaths.push(o.details);
      }
      c.close();
    }
    // The requested path is quoted back, escaped: no NUL, no terminal escape.
    expect(refusedPaths.some((d) => d.includes("\\u{1b}") || d.includes("\\u{0}"))).toBe(true);
  }, 60_000);
});
