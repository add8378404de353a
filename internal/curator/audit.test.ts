// The audit trail on a real curator over real etcd: owner writes and their
// results, refusals rate-limited per caller, reads left out, GetEvents with
// and without follow, a node filter, and the bound on what is kept.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { ClusterEvent_Kind, Management, type ClusterEvent } from "../../proto/gen/api/management_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { captureLogger } from "../log/mod.ts";
import { generateKeyPair, issueOwnerCertificate, rawPublicKey, type KeyPair } from "../pki/mod.ts";
import { PermissionDeniedError, Status } from "../rpc/mod.ts";
import { eventually } from "../testing/mod.ts";
import { AuditTrail, EVENTS_PREFIX, REFUSALS_PER_MINUTE, REFUSALS_PER_MINUTE_OVERALL, readEvents, targetOf } from "./audit.ts";
import { actorOf, describeRequest } from "../rpc/mod.ts";
import { refusal, startTestCluster, type TestCluster } from "./test_cluster.ts";

let cluster: TestCluster;
let owner: { kind: "owner"; certificate: X509Certificate; privateKey: KeyPair["privateKey"] };

beforeAll(async () => {
  // Its node never beats: with the product's timeout, a health event
  // (UNKNOWN → HEARTBEAT_TIMEOUT) would land among the tests' own events
  // 12 s in, wherever a loaded machine's test had got to by then.
  cluster = await startTestCluster({ heartbeatTimeoutMs: 3_600_000 });
  owner = { kind: "owner", certificate: issueOwnerCertificate(cluster.clusterCA, cluster.ownerKey.publicKey), privateKey: cluster.ownerKey.privateKey };
}, 120_000);
afterAll(async () => {
  await cluster?.close();
});

const events = async (filter: { nodeId?: string; last?: number } = {}) => (await readEvents(cluster.store.etcd, { last: filter.last ?? 1_000, ...filter })).events;

describe("what an event says", () => {
  test("the actor, the node acted on, and what was asked, in one bounded line", () => {
    expect(actorOf({ kind: "anonymous" }, "10.0.0.9")).toBe("anonymous from 10.0.0.9");
    expect(actorOf(undefined, undefined)).toBe("anonymous");
    expect(targetOf({ id: "node-0123456789abcdef", consensusMember: true })).toBe("node-0123456789abcdef");
    expect(targetOf({ schedule: { nodeId: "node-0123456789abcdef" } })).toBe("node-0123456789abcdef");
    expect(describeRequest({ $typeName: "x", id: "node-0123456789abcdef", consensusMember: true, publicKey: new Uint8Array(32) })).toBe("{consensusMember: true}");
    expect(describeRequest({ $typeName: "x", upsert: [{ $typeName: "y", key: "zone", value: "a" }], delete: ["rack"] })).toBe('{upsert: [{key: "zone", value: "a"}], delete: ["rack"]}');
    const long = describeRequest({ upsert: [{ key: "k", value: "\u0000\u001b[31m".repeat(200) }] });
    expect(long.length).toBeLessThanOrEqual(300);
    expect(long).not.toContain("\u001b");
  });
});

describe("the trail of a curator", () => {
  test("an owner write is recorded with its result, a failed one with its status, and reads are not", async () => {
    const management = cluster.client(Management, owner);
    const id = cluster.node.id;
    await management.updateNodeLabels({ id, upsert: [{ key: "zone", value: "a" }] });
    for await (const _ of management.getNodes({}));
    const missing = "node-00000000000000ff";
    expect((await refusal(management.deleteNode({ id: missing }))).code).toBe(Status.NOT_FOUND);
    management.close();
    const recorded = await eventually(async () => {
      const list = (await events()).filter((e) => e.kind === ClusterEvent_Kind.CALL);
      expect(list.length).toBe(2);
      return list;
    });
    expect(recorded.map((e) => [e.actor, e.method, e.nodeId, e.detail, e.result])).toEqual([
      ["owner", "Management/UpdateNodeLabels", id, '{upsert: [{key: "zone", value: "a"}], delete: []}', "OK"],
      ["owner", "Management/DeleteNode", missing, "", `NOT_FOUND: node ${missing} not found`],
    ]);
    expect(Number(recorded[0]!.timeMs)).toBeGreaterThan(Date.now() - 60_000);
    // A key of the owner's (Kubernetes credentials) names no node.
    const management2 = cluster.client(Management, owner);
    await management2.getKubernetesCredentials({ publicKey: rawPublicKey(generateKeyPair().publicKey) }).catch(() => {});
    // A metrics reader's credential (a year long) is recorded too, by its name.
    await management2.getMetricsCredentials({ publicKey: rawPublicKey(generateKeyPair().publicKey), name: "prometheus-1" });
    management2.close();
    const credentials = await eventually(async () => {
      const found = (await events()).filter((e) => e.method === "Management/GetKubernetesCredentials" || e.method === "Management/GetMetricsCredentials");
      expect(found.length).toBe(2);
      return found;
    });
    expect(credentials.map((e) => [e.method, e.nodeId, e.detail, e.result])).toEqual([
      ["Management/GetKubernetesCredentials", "", "", expect.any(String)],
      ["Management/GetMetricsCredentials", "", '{name: "prometheus-1"}', "OK"],
    ]);
  });

  test("refused calls are recorded, at most a few per caller and minute", async () => {
    const stranger = generateKeyPair();
    const management = cluster.client(Management, { kind: "self-signed", key: stranger });
    // The allowance is per minute of the clock: the calls all fall in one.
    if (Date.now() % 60_000 > 45_000) await Bun.sleep(60_000 - (Date.now() % 60_000) + 100);
    for (let i = 0; i < REFUSALS_PER_MINUTE + 5; i++) expect((await refusal(management.approveNode({ id: cluster.node.id }))).code).toBe(Status.UNAUTHENTICATED);
    management.close();
    const refusals = async () => (await events()).filter((e) => e.kind === ClusterEvent_Kind.REFUSAL);
    await eventually(async () => expect((await refusals()).length).toBeGreaterThanOrEqual(REFUSALS_PER_MINUTE));
    // Had more been let through, they would be written by now too.
    await Bun.sleep(500);
    const refused = await refusals();
    expect(refused.length).toBe(REFUSALS_PER_MINUTE);
    expect(refused[0]!.actor).toBe("an unverified key from 127.0.0.1");
    expect(refused[0]!.method).toBe("Management/ApproveNode");
    expect(refused[0]!.result).toStartWith("UNAUTHENTICATED: ");
  });

  test("GetEvents: the newest N oldest first, by node, and a follower sees a new write at once", async () => {
    const management = cluster.client(Management, owner);
    const all: ClusterEvent[] = [];
    for await (const e of management.getEvents({})) all.push(e);
    expect(all.length).toBeGreaterThanOrEqual(2 + REFUSALS_PER_MINUTE);
    expect(all.map((e) => e.timeMs)).toEqual([...all.map((e) => e.timeMs)].sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)));
    const two: ClusterEvent[] = [];
    for await (const e of management.getEvents({ last: 2 })) two.push(e);
    expect(two).toEqual(all.slice(-2));
    const about: ClusterEvent[] = [];
    for await (const e of management.getEvents({ nodeId: cluster.node.id })) about.push(e);
    expect(about.length).toBeGreaterThan(0);
    expect(about.every((e) => e.nodeId === cluster.node.id)).toBe(true);
    const bad = (async () => {
      for await (const _ of management.getEvents({ nodeId: "node-x\u0000" }));
    })();
    expect((await refusal(bad)).code).toBe(Status.INVALID_ARGUMENT);

    const stop = new AbortController();
    const followed: ClusterEvent[] = [];
    const following = (async () => {
      for await (const e of management.getEvents({ last: 1, follow: true }, { signal: stop.signal })) followed.push(e);
    })().catch(() => {});
    await eventually(() => expect(followed.length).toBe(1));
    await management.updateNodeLabels({ id: cluster.node.id, delete: ["zone"] });
    await eventually(() => expect(followed.at(-1)?.detail).toBe('{upsert: [], delete: ["zone"]}'), { intervalMs: 5 });
    stop.abort();
    await following;
    management.close();
  });

  test("a node's report of its own node management call is recorded about that node, the caller marked as its word; a bad method is refused", async () => {
    const curator = cluster.client(Curator, { kind: "node", certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey });
    await curator.reportNodeManagementCall({ method: "NodeManagement/Reboot", caller: "owner", detail: "", result: "OK", refused: false, timeMs: BigInt(Date.now()) });
    expect((await refusal(curator.reportNodeManagementCall({ method: "Management/DeleteNode", caller: "owner", detail: "", result: "OK", refused: false, timeMs: 0n }))).code).toBe(
      Status.INVALID_ARGUMENT,
    );
    curator.close();
    const reboot = await eventually(async () => {
      const found = (await events()).find((e) => e.method === "NodeManagement/Reboot");
      expect(found).toBeDefined();
      return found!;
    });
    expect([reboot.kind, reboot.actor, reboot.nodeId, reboot.result]).toEqual([ClusterEvent_Kind.CALL, `owner (as ${cluster.node.id} reports)`, cluster.node.id, "OK"]);
  });

  test("the trail keeps the newest MAX events: pruning deletes the oldest", async () => {
    const trail = new AuditTrail(cluster.store.etcd, captureLogger("audit").logger);
    const before = (await events()).length;
    for (let i = 0; i < 5; i++) trail.record({ kind: ClusterEvent_Kind.HEALTH, actor: "curator test", nodeId: cluster.node.id, detail: `pruning ${i}` });
    await trail.flush();
    const kept = before + 5 - 3;
    expect(await trail.prune(kept)).toBe(3);
    const left = await events();
    expect(left.length).toBe(kept);
    expect(left.at(-1)!.detail).toBe("pruning 4");
    expect(await cluster.store.etcd.getAll().prefix(EVENTS_PREFIX).count()).toBe(kept);
  });

  test("a flood of refusals from many addresses costs the trail a bounded number of writes and one count, and never an owner's write", async () => {
    const base = Math.floor(Date.now() / 60_000) * 60_000;
    let now = base;
    const trail = new AuditTrail(
      cluster.store.etcd,
      captureLogger("audit").logger,
      (e) => e,
      () => now,
    );
    const flood = `flood-${base}`;
    // 2100 addresses, six refused calls each (no certificate), as the outside test did.
    for (let i = 0; i < 2100; i++) {
      for (let j = 0; j < 6; j++) {
        trail.tap({
          method: "Management/UpdateNodeLabels",
          localName: "updateNodeLabels",
          peer: { kind: "anonymous" },
          remoteAddress: `10.${i >> 8}.${i & 255}.${j}`,
          request: undefined,
          error: new PermissionDeniedError(flood),
        });
      }
    }
    // The owner's write, right after: recorded, whatever is queued.
    trail.tap({
      method: "Management/UpdateNodeLabels",
      localName: "updateNodeLabels",
      peer: { kind: "owner" } as never,
      remoteAddress: "127.0.0.1",
      request: { id: cluster.node.id, upsert: [{ key: flood, value: "x" }], delete: [] },
    });
    await trail.flush();
    const written = (await events()).filter((e) => e.result.includes(flood) || e.detail.includes(flood));
    const refusals = written.filter((e) => e.kind === ClusterEvent_Kind.REFUSAL);
    expect(refusals.length).toBe(REFUSALS_PER_MINUTE_OVERALL);
    expect(written.filter((e) => e.kind === ClusterEvent_Kind.CALL).map((e) => e.actor)).toEqual(["owner"]);
    // The next minute's first refusal brings the count of what was left out.
    now = base + 60_000;
    trail.tap({
      method: "Management/UpdateNodeLabels",
      localName: "updateNodeLabels",
      peer: { kind: "anonymous" },
      remoteAddress: "10.99.0.1",
      request: undefined,
      error: new PermissionDeniedError(flood),
    });
    await trail.flush();
    const counted = (await events()).filter((e) => e.timeMs === BigInt(base + 60_000) && e.detail.startsWith("and "));
    expect(counted.map((e) => e.detail)).toEqual([
      `and ${2100 * 6 - REFUSALS_PER_MINUTE_OVERALL} more refused calls from ${2100 * 6 > 10_000 ? "at least " : ""}${Math.min(2100 * 6, 10_000)} callers in that minute, not recorded one by one`,
    ]);
  });
});
