// A cold start of the whole cluster with no key on any ESP that opens that
// node's own data: three consensus node processes split their cluster
// halves among each other, all three stop, and they come back in every
// order, together, and with one held back, by combining the shares the
// others hold, with every acknowledged write. The test reads the ESP files
// itself.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { fromBinary } from "@bufbuild/protobuf";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Etcd3 } from "etcd3";
import { readSealedConfiguration } from "../internal/localstorage/mod.ts";
import { readHeldShares } from "../internal/coldstart/mod.ts";
import { NodeRecordSchema } from "../proto/gen/curator/state/state_pb.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import type { NodeProcess } from "./support/node_process.ts";
import { etcdClientOf, formProcessCluster, type ProcessCluster } from "./support/process_cluster.ts";

const dir = tempDir("nodecore-coldstart-");
let cluster: ProcessCluster;
/** Each node's cluster half, as the cluster's records hold it. */
const halves = new Map<NodeProcess, Uint8Array>();
const acknowledged: string[] = [];

beforeAll(async () => {
  cluster = await formProcessCluster(dir.path, 60);
}, 240_000);

afterAll(async () => {
  await cluster?.stop();
  dir[Symbol.dispose]();
}, 60_000);

async function withEtcd<T>(via: NodeProcess, use: (etcd: Etcd3) => Promise<T>): Promise<T> {
  const etcd = await etcdClientOf(via);
  try {
    return await use(etcd);
  } finally {
    etcd.close();
  }
}

/** Every file under `path`, read whole. */
function filesUnder(path: string): { path: string; bytes: Buffer }[] {
  return readdirSync(path, { recursive: true, encoding: "utf8" })
    .map((name) => join(path, name))
    .filter((file) => statSync(file).isFile())
    .map((file) => ({ path: file, bytes: readFileSync(file) }));
}

function expectNoOwnHalfOnEsp(node: NodeProcess): void {
  const half = Buffer.from(halves.get(node)!);
  const sealed = readSealedConfiguration(node.layout.esp.sealed)!;
  expect(sealed.coldStartClusterUnlockKey.length).toBe(0);
  for (const file of filesUnder(node.layout.esp.path)) {
    if (file.bytes.includes(half)) throw new Error(`${node.name}'s ESP file ${file.path} contains its own cluster half`);
  }
}

async function writeAcknowledged(via: NodeProcess, key: string): Promise<void> {
  await eventually(() => withEtcd(via, (etcd) => etcd.put(key).value("acknowledged").exec()), { timeoutMs: 60_000, intervalMs: 500 });
  acknowledged.push(key);
}

async function expectEveryWrite(via: NodeProcess): Promise<void> {
  const keys = await eventually(() => withEtcd(via, (etcd) => etcd.getAll().prefix("coldstart-test/").keys()), { timeoutMs: 60_000, intervalMs: 500 });
  expect(keys.sort()).toEqual([...acknowledged].sort());
}

async function stopAll(): Promise<void> {
  await Promise.all(cluster.nodes.map((n) => n.stop()));
}

/**
 * Starts the nodes in this order, `gapMs` apart; resolves once every one is
 * UP again, with how each opened its data: from its shares, or through a
 * curator that was serving again by the time it asked.
 */
async function startInOrder(order: NodeProcess[], gapMs: number): Promise<Map<NodeProcess, "shares" | "curator">> {
  const from = new Map(order.map((n) => [n, n.logs.length]));
  for (const node of order) {
    node.start();
    await Bun.sleep(gapMs);
  }
  const opened: Opened = new Map();
  for (const node of order) opened.set(node, await openedAndUp(node, from.get(node)!));
  return opened;
}

type Opened = Map<NodeProcess, "shares" | "curator">;
const OPENED_FROM_SHARES = "cold start: this node's cluster half is whole again from its shares";
const JOINED_THROUGH_A_CURATOR = "got the cluster unlock key";

/** Waits for the node, after log line `from`, to open its data and be UP; says how it opened it. */
async function openedAndUp(node: NodeProcess, from: number): Promise<"shares" | "curator"> {
  const line = await node.waitForLog((l) => l.msg === OPENED_FROM_SHARES || l.msg === JOINED_THROUGH_A_CURATOR, { from, timeoutMs: 120_000, what: "opened from shares, or through a curator" });
  await node.waitForLog((l) => l.msg === "node is UP", { from, timeoutMs: 120_000, what: "UP after the cold start" });
  return line.msg === OPENED_FROM_SHARES ? "shares" : "curator";
}

/**
 * No curator can answer before two members have opened their data (etcd
 * needs two of three), and each needs the shares of both others: at least
 * two open from shares. The last may find their curator serving by the
 * time it asks, and join through it like any restarted node.
 */
function expectTwoFromShares(opened: Opened): void {
  const fromShares = [...opened.values()].filter((how) => how === "shares").length;
  if (fromShares < 2) throw new Error(`only ${fromShares} of 3 nodes opened from shares: ${[...opened].map(([n, how]) => `${n.name} ${how}`).join(", ")}`);
}

describe("cold start with threshold shares", () => {
  test("every consensus member's cluster half is split among the other two, and off its ESP", async () => {
    const [node1] = cluster.nodes as [NodeProcess];
    const records = await withEtcd(node1, (etcd) => etcd.getAll().prefix("/nodecore/nodes/").buffers());
    for (const node of cluster.nodes) {
      const record = Object.values(records)
        .map((b) => fromBinary(NodeRecordSchema, b))
        .find((r) => r.id === cluster.ids.get(node));
      halves.set(node, record!.clusterUnlockKey);
    }
    for (const node of cluster.nodes) {
      await eventually(
        () => {
          const shares = readSealedConfiguration(node.layout.esp.sealed)?.unlockShares;
          if (!shares) throw new Error(`${node.name} has not committed its shares yet`);
          const others = cluster.nodes.filter((n) => n !== node).map((n) => cluster.ids.get(n)!);
          expect(shares.holders).toEqual(others.sort());
          expect(shares.threshold).toBe(2);
        },
        { timeoutMs: 60_000, intervalMs: 200 },
      );
      expectNoOwnHalfOnEsp(node);
    }
    for (let i = 0; i < 5; i++) await writeAcknowledged(cluster.nodes[i % 3]!, `coldstart-test/before-${i}`);
    const info = await cluster.ctl("cluster", "info");
    expect(info.stdout).toContain("cold start: each consensus member needs shares from any 2 of the other 2 (a majority)");
  }, 120_000);

  test("all three stop, and come back in every order (a second apart), each time with every write", async () => {
    const [node1, node2, node3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const orders = [
      [node1, node2, node3],
      [node1, node3, node2],
      [node2, node1, node3],
      [node2, node3, node1],
      [node3, node1, node2],
      [node3, node2, node1],
    ];
    for (const [i, order] of orders.entries()) {
      await stopAll();
      expectTwoFromShares(await startInOrder(order, 1_000));
      await expectEveryWrite(order[2]!);
      await writeAcknowledged(order[0]!, `coldstart-test/after-order-${i}`);
    }
    for (const node of cluster.nodes) expectNoOwnHalfOnEsp(node);
  }, 600_000);

  test("with one node held back, the others say whose share they wait for, and come back when it does", async () => {
    await stopAll();
    const [node1, node2, node3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const from = new Map(cluster.nodes.map((n) => [n, n.logs.length]));
    node1.start();
    node3.start();
    // Each needs both other shares (threshold 2): node2's is missing. Once
    // each says it has one share (the other's) and waits for node2's, neither
    // can open: a curator would need one of them open first. That event
    // proves the negative; no time has to pass for it.
    for (const node of [node1, node3]) {
      const waiting = await node.waitForLog((l) => l.msg.startsWith("cold start: no curator answers; have 1 of 2 shares"), {
        from: from.get(node)!,
        timeoutMs: 60_000,
        what: "waiting for node2's share",
      });
      expect(waiting.msg).toContain(cluster.ids.get(node2)!);
    }
    for (const node of [node1, node3]) expect(node.logs.slice(from.get(node)!).some((l) => l.msg === "node is UP")).toBe(false);
    const opened = await startInOrder([node2], 0);
    for (const node of [node1, node3]) opened.set(node, await openedAndUp(node, from.get(node)!));
    expectTwoFromShares(opened);
    await expectEveryWrite(node3);
    await writeAcknowledged(node1, "coldstart-test/after-second");
  }, 300_000);

  test("all three stop once more and start together, in yet another order", async () => {
    await stopAll();
    const [node1, node2, node3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    expectTwoFromShares(await startInOrder([node2, node3, node1], 0));
    await expectEveryWrite(node2);
    for (const node of cluster.nodes) expectNoOwnHalfOnEsp(node);
  }, 300_000);

  test("when a node leaves consensus the others split again without it, and it holds no shares any more", async () => {
    const [node1, node2, node3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
    const id = (n: NodeProcess) => cluster.ids.get(n)!;
    await eventually(() => cluster.ctl("node", "roles", "unset", id(node3), "consensus"), { timeoutMs: 60_000, intervalMs: 500 });
    for (const [node, other] of [
      [node1, node2],
      [node2, node1],
    ] as const) {
      await eventually(
        () => {
          const shares = readSealedConfiguration(node.layout.esp.sealed)?.unlockShares;
          expect(shares?.holders).toEqual([id(other)]);
          expect(shares?.threshold).toBe(1);
          expect(readHeldShares(node.layout.esp.heldShares).shares.map((s) => s.owner)).toEqual([id(other)]);
        },
        { timeoutMs: 60_000, intervalMs: 200 },
      );
      expectNoOwnHalfOnEsp(node);
    }
    await eventually(
      () => {
        const sealed = readSealedConfiguration(node3.layout.esp.sealed)!;
        expect(sealed.unlockShares).toBeUndefined();
        expect(sealed.coldStartClusterUnlockKey.length).toBe(0);
        expect(readHeldShares(node3.layout.esp.heldShares).shares).toEqual([]);
      },
      { timeoutMs: 60_000, intervalMs: 200 },
    );
  }, 120_000);
});
