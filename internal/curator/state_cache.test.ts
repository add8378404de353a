// The state cache over real etcd: reads answered from memory must still see
// every write etcd acknowledged before they began (linearizable), whichever
// cache or curator answers, when etcd's revision moves on outside the
// curator's keys, across a curator leader change and across an etcd restart.
//
// Each read follows its write at once, with no waiting in between: a cache
// that answered before catching up with etcd would show the older state.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { X509Certificate } from "node:crypto";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { NodeState, NodeStatusSchema } from "../../proto/gen/common/common_pb.ts";
import { ClusterRecordSchema, NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { captureLogger } from "../log/mod.ts";
import { generateKeyPair, nodeIdFromPublicKey, rawPublicKey } from "../pki/mod.ts";
import { supervise } from "../supervisor/mod.ts";
import { eventually, freePort } from "../testing/mod.ts";
import type { CuratorEndpoint } from "./client/mod.ts";
import { StateCache, type StateCacheOptions } from "./state_cache.ts";
import { CLUSTER_KEY } from "./store.ts";
import { startTestCluster, type TestCluster } from "./test_cluster.ts";

let cluster: TestCluster;

beforeAll(async () => {
  cluster = await startTestCluster();
}, 120_000);

afterAll(async () => {
  await cluster?.close();
});

/** A StateCache on the cluster's etcd, run by a supervisor of its own as a curator runs one; loaded. */
async function startCache(options: StateCacheOptions = {}): Promise<{ cache: StateCache; stop: () => Promise<void> }> {
  const cache = new StateCache(cluster.etcd, options);
  const { logger } = captureLogger("state-cache");
  const supervisor = supervise(cache.runnable(), { logger, backoff: { initialMs: 100, multiplier: 1.5, maxMs: 1000, jitter: 0.2 } });
  await eventually(() => cache.live, { what: "the state cache loaded" });
  return { cache, stop: () => supervisor.stop() };
}

/** Writes the first node's status version straight to etcd; resolves once etcd acknowledged it. */
async function setVersion(version: string): Promise<void> {
  await cluster.store.updateNode(cluster.node.id, (r) => {
    r.status ??= create(NodeStatusSchema);
    r.status.version = version;
    return r;
  });
}

const versionIn = (snapshot: { node(id: string): { status?: { version: string } | undefined } | undefined }) => snapshot.node(cluster.node.id)?.status?.version;

/** Writes a new register ticket into the cluster record, straight to etcd. */
async function setTicket(ticket: Uint8Array): Promise<void> {
  const record = (await cluster.store.cluster())!;
  record.registerTicket = ticket;
  await cluster.store.etcd.put(CLUSTER_KEY).value(Buffer.from(toBinary(ClusterRecordSchema, record)));
}

async function ownerCredentials() {
  const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
  const escrow = await aaa.escrow({});
  aaa.close();
  return { kind: "owner" as const, certificate: new X509Certificate(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
}

describe("state cache", () => {
  test("a read sees every write acknowledged before it began, from either of two caches", async () => {
    const a = await startCache();
    const b = await startCache();
    try {
      for (let i = 0; i < 30; i++) {
        await setVersion(`v${i}`);
        expect(versionIn(await (i % 2 === 0 ? a : b).cache.read())).toBe(`v${i}`);
      }
      // A node created, then deleted: a deletion is no event a range could show.
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      const record = create(NodeRecordSchema, { id, publicKey: rawPublicKey(key.publicKey), joinKey: rawPublicKey(generateKeyPair().publicKey), state: NodeState.NEW });
      expect(await cluster.store.createNode(record)).toBe("created");
      expect((await a.cache.read()).node(id)?.state).toBe(NodeState.NEW);
      expect((await b.cache.read()).nodeByJoinKey(record.joinKey)?.id).toBe(id);
      expect(await cluster.store.deleteNode(id, () => {})).toBe("deleted");
      expect((await b.cache.read()).node(id)).toBeUndefined();
      expect((await a.cache.read()).nodeIdByJoinKey(record.joinKey)).toBeUndefined();
      // Answered from memory, not by reading etcd's keys again.
      expect(a.cache.counts.fromCopy).toBeGreaterThan(0);
      expect(b.cache.counts.fromCopy).toBeGreaterThan(0);
    } finally {
      await a.stop();
      await b.stop();
    }
  }, 60_000);

  test("a copy that fell behind etcd is not answered from: the read waits for the events the watch owes it", async () => {
    // Watch responses held back while `holding`, as a slow watch would.
    let holding = false;
    const held: (() => void)[] = [];
    const a = await startCache({ deliver: (apply) => (holding ? held.push(apply) : apply()) });
    const release = () => {
      holding = false;
      for (const apply of held.splice(0)) apply();
    };
    /** Writes while the copy cannot see it, reads, and lets the events through only once the read has asked etcd. */
    const readAfterHeldWrite = async (write: () => Promise<unknown>) => {
      holding = true;
      await write();
      const checks = a.cache.counts.checks;
      const reading = a.cache.read();
      await eventually(() => a.cache.counts.checks > checks, { what: "the read's check answered" });
      release();
      return reading;
    };
    try {
      // A changed record: as many keys as before, one written since the copy's revision.
      await setVersion("unheld");
      expect(versionIn(await readAfterHeldWrite(() => setVersion("held")))).toBe("held");
      // A deleted record: no key written since, one key fewer.
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      const record = create(NodeRecordSchema, { id, publicKey: rawPublicKey(key.publicKey), joinKey: rawPublicKey(generateKeyPair().publicKey), state: NodeState.NEW });
      expect((await readAfterHeldWrite(() => cluster.store.createNode(record))).node(id)?.id).toBe(id);
      expect((await readAfterHeldWrite(() => cluster.store.deleteNode(id, () => {}))).node(id)).toBeUndefined();
    } finally {
      release();
      await a.stop();
    }
  }, 60_000);

  test("writes outside the curator's keys, which the watch never reports, are proven by revision, not waited for", async () => {
    const a = await startCache();
    try {
      await setVersion("before-elsewhere");
      expect(versionIn(await a.cache.read())).toBe("before-elsewhere");
      const proofs = a.cache.counts.proofs;
      for (let i = 0; i < 5; i++) await cluster.etcd.put(`/elsewhere/${i}`).value("x");
      expect(versionIn(await a.cache.read())).toBe("before-elsewhere");
      expect(a.cache.counts.proofs).toBeGreaterThan(proofs);
      // A write under the prefix after them is still seen at once.
      await cluster.etcd.put("/elsewhere/again").value("y");
      await setVersion("after-elsewhere");
      expect(versionIn(await a.cache.read())).toBe("after-elsewhere");
    } finally {
      await a.stop();
      await cluster.etcd.delete().prefix("/elsewhere/");
    }
  }, 60_000);

  test("each curator's reads see the writes acknowledged before them, before and after a leader change", async () => {
    const owner = await ownerCredentials();
    const secondPort = await freePort();
    const second = await cluster.addCurator(secondPort);
    await eventually(() => second.leadership.peek()?.leader?.nodeId === cluster.node.id, { timeoutMs: 20_000, what: "the second curator following" });
    const ticketVia = async (endpoint: CuratorEndpoint) => {
      const management = cluster.client(Management, owner, endpoint);
      try {
        return Buffer.from((await management.getRegisterTicket({})).ticket).toString();
      } finally {
        management.close();
      }
    };
    const writeThenReadEverywhere = async (round: string) => {
      for (let i = 0; i < 10; i++) {
        const ticket = `${round}-${i}`;
        await setTicket(Buffer.from(ticket));
        expect(await ticketVia(i % 2 === 0 ? cluster.endpoint : second.endpoint)).toBe(ticket);
      }
    };
    await writeThenReadEverywhere("first-leads");

    await cluster.stopCurator(cluster.curatorPort);
    await eventually(() => second.leadership.peek()?.isLeader === true, { timeoutMs: 30_000, what: "the second curator leading" });
    cluster.restartFirstCurator();
    await eventually(() => ticketVia(cluster.endpoint), { timeoutMs: 30_000, what: "the first curator serving again" });
    await writeThenReadEverywhere("second-leads");

    // A write through the new leader's API, read back through it at once.
    const management = cluster.client(Management, owner, second.endpoint);
    await management.updateNodeLabels({ id: cluster.node.id, upsert: [{ key: "zone", value: "after-failover" }] });
    const nodes = [];
    for await (const node of management.getNodes({})) nodes.push(node);
    management.close();
    expect(nodes.find((n) => n.id === cluster.node.id)?.labels.map((l) => `${l.key}=${l.value}`)).toEqual(["zone=after-failover"]);
  }, 120_000);

  test("after etcd restarts, the copy is loaded again and reads still see every acknowledged write", async () => {
    const a = await startCache();
    try {
      const loads = a.cache.counts.loads;
      await setVersion("before-restart");
      expect(versionIn(await a.cache.read())).toBe("before-restart");
      await cluster.killEtcd();
      // The copy is dropped when its watch breaks, and loaded again afresh.
      await eventually(() => a.cache.counts.loads > loads && a.cache.live, { timeoutMs: 30_000, what: "the copy loaded again" });
      for (let i = 0; i < 10; i++) {
        await setVersion(`after-restart-${i}`);
        expect(versionIn(await a.cache.read())).toBe(`after-restart-${i}`);
      }
      // The curators' reads too.
      const owner = await ownerCredentials();
      const management = cluster.client(Management, owner);
      for (let i = 0; i < 5; i++) {
        await setTicket(Buffer.from(`after-restart-${i}`));
        expect(Buffer.from((await management.getRegisterTicket({})).ticket).toString()).toBe(`after-restart-${i}`);
      }
      management.close();
    } finally {
      await a.stop();
    }
  }, 120_000);
});
