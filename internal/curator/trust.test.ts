// The trust boundary of the curator, against a real one-node cluster on
// loopback: what an enrolled node (or anyone with a ticket) may try, and
// what each attempt gets. Every refusal is checked three ways: the error
// names the problem, the curator stays up, and the owner is still served.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { X509Certificate } from "node:crypto";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { NodeStatusSchema, NodeStatus_RunningCuratorSchema, ServiceStatusSchema, type NodeStatus } from "../../proto/gen/common/common_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { Value } from "../event/mod.ts";
import { generateKeyPair, nodeIdFromPublicKey, rawPublicKey, type KeyPair } from "../pki/mod.ts";
import { Status } from "../rpc/mod.ts";
import { eventually } from "../testing/mod.ts";
import { ELECTION_NAME, type Leadership } from "./leadership.ts";
import { refusal, startTestCluster, type TestCluster } from "./test_cluster.ts";
import { NodeWatchHub } from "./watch.ts";

let cluster: TestCluster;
let owner: { kind: "owner"; certificate: X509Certificate; privateKey: KeyPair["privateKey"] };
/** An enrolled node without roles: the attacker. */
let mallory: { key: KeyPair; joinKey: KeyPair; id: string; certificate: X509Certificate };

/** Registers, approves and commits a new node; returns its identity. */
async function enrol(): Promise<{ key: KeyPair; joinKey: KeyPair; id: string; certificate: X509Certificate }> {
  const key = generateKeyPair();
  const joinKey = generateKeyPair();
  const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
  const management = cluster.client(Management, owner);
  const { ticket } = await management.getRegisterTicket({});
  const handshake = cluster.client(Curator, { kind: "self-signed", key });
  await handshake.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) });
  await management.approveNode({ id });
  const committed = await handshake.commitNode({ clusterUnlockKey: new Uint8Array(32).fill(9) });
  handshake.close();
  management.close();
  return { key, joinKey, id, certificate: new X509Certificate(committed.nodeCertificate) };
}

/** The owner is still served by the (same) curator. */
async function ownerStillServed(): Promise<void> {
  const management = cluster.client(Management, owner);
  const nodes = [];
  for await (const node of management.getNodes({})) nodes.push(node.id);
  management.close();
  expect(nodes).toContain(cluster.node.id);
}

beforeAll(async () => {
  cluster = await startTestCluster();
  const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
  const escrow = await aaa.escrow({});
  aaa.close();
  owner = { kind: "owner", certificate: new X509Certificate(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
  mallory = await enrol();
}, 120_000);

// Closing waits for etcd to stop, which can take its whole 5 s SIGTERM grace (bun's default hook timeout).
afterAll(async () => {
  await cluster?.close();
}, 30_000);

describe("a node posing as a curator", () => {
  test("reporting a running curator at an address of its choosing does not put it in the curator directory", async () => {
    const asMallory = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
    await asMallory.updateNodeStatus({
      nodeId: mallory.id,
      status: { externalAddress: "127.0.0.66", runningCurator: { port: 7835 }, timestampMs: BigInt(Date.now()), version: "evil" },
    });
    asMallory.close();
    const management = cluster.client(Management, owner);
    const info = await management.getClusterInfo({});
    management.close();
    const directory = info.clusterDirectory!.nodes.map((n) => ({ id: nodeIdFromPublicKey(n.publicKey), hosts: n.addresses.map((a) => a.host) }));
    expect(directory).toEqual([{ id: cluster.node.id, hosts: [cluster.host] }]);
  });

  test("its node certificate is no curator certificate, so it cannot serve as one (client side: curator/client tests)", () => {
    expect(mallory.certificate.subject).toContain("O=nodecore node");
    expect(mallory.certificate.subjectAltName).toBe(`DNS:${mallory.id}`);
  });
});

describe("registration", () => {
  test("a join key already in use by another node is refused, naming that node, and that node can still join", async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    management.close();
    const impostor = generateKeyPair();
    const handshake = cluster.client(Curator, { kind: "self-signed", key: impostor });
    const err = await refusal(handshake.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(mallory.joinKey.publicKey) }));
    handshake.close();
    expect(err.code).toBe(Status.ALREADY_EXISTS);
    expect(err.details).toBe(`join key already in use by node ${mallory.id}`);
    expect(await cluster.store.node(nodeIdFromPublicKey(rawPublicKey(impostor.publicKey)))).toBeUndefined();
    // The rightful holder still joins.
    const join = cluster.client(Curator, { kind: "self-signed", key: mallory.joinKey });
    expect((await join.joinNode({})).clusterUnlockKey).toEqual(new Uint8Array(32).fill(9));
    join.close();
    await ownerStillServed();
  });

  test("a node key already registered with another join key is refused, naming the node", async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    management.close();
    const handshake = cluster.client(Curator, { kind: "self-signed", key: mallory.key });
    const err = await refusal(handshake.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(generateKeyPair().publicKey) }));
    handshake.close();
    expect(err.code).toBe(Status.ALREADY_EXISTS);
    expect(err.details).toBe(`node key already in use: node ${mallory.id} is registered with another join key`);
  });

  test("non-canonical join keys are refused", async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    management.close();
    const handshake = cluster.client(Curator, { kind: "self-signed", key: generateKeyPair() });
    for (const joinKey of [new Uint8Array(32).fill(0xff), new Uint8Array(32), new Uint8Array(31)]) {
      const err = await refusal(handshake.registerNode({ registerTicket: ticket, joinKey }));
      expect(err.code).toBe(Status.INVALID_ARGUMENT);
      expect(err.details).toStartWith("join_key: ");
    }
    handshake.close();
  });
});

describe("node status", () => {
  const good = (): NodeStatus =>
    create(NodeStatusSchema, { externalAddress: "127.0.0.5", timestampMs: BigInt(Date.now()), version: "1.0", services: [{ name: "consensus", state: "voter", message: "" }] });
  const cases: [string, (s: NodeStatus) => void, string][] = [
    ["an ANSI escape in the address", (s) => (s.externalAddress = "\u001b[31m10.0.0.1"), "status.external_address: "],
    ["a host name as the address", (s) => (s.externalAddress = "evil.example"), "status.external_address: 'evil.example' is not an IP address"],
    ["BEL in the version", (s) => (s.version = "1.0\u0007"), "status.version: contains an unprintable character (U+0007)"],
    ["NUL in a service message", (s) => (s.services[0]!.message = "ok\u0000"), "status.services[0].message: contains an unprintable character (U+0000)"],
    ["a newline in a service message", (s) => (s.services[0]!.message = "line\nforged line"), "status.services[0].message: contains an unprintable character (U+000A)"],
    ["a right-to-left override in a service message", (s) => (s.services[0]!.message = "\u202egnp.exe"), "status.services[0].message: contains an unprintable character (U+202E)"],
    ["a timestamp of INT64_MIN", (s) => (s.timestampMs = -(2n ** 63n)), "status.timestamp_ms: "],
    ["a curator port of -1", (s) => (s.runningCurator = create(NodeStatus_RunningCuratorSchema, { port: -1 })), "status.running_curator.port: -1 is not a port (1-65535)"],
    ["a curator port of 70000", (s) => (s.runningCurator = create(NodeStatus_RunningCuratorSchema, { port: 70000 })), "status.running_curator.port: 70000 is not a port (1-65535)"],
    ["a service name with spaces", (s) => (s.services[0]!.name = "my service"), "status.services[0].name: 'my service' is not a name"],
    ["a version of 10,000 characters", (s) => (s.version = "x".repeat(10_000)), "status.version: 10000 characters, more than 64"],
    ["a Kubernetes version of 10,000 characters", (s) => (s.kubernetesVersion = "v".repeat(10_000)), "status.kubernetes_version: 10000 characters, more than 64"],
    [
      "60,000 service entries",
      (s) => (s.services = Array.from({ length: 60_000 }, (_, i) => create(ServiceStatusSchema, { name: `s${i}`, state: "up", message: "" }))),
      "status.services: 60000 entries, more than 64",
    ],
  ];
  for (const [what, spoil, message] of cases) {
    test(`${what} is refused, naming the field`, async () => {
      const before = (await cluster.store.node(mallory.id))!.value.status;
      const status = good();
      spoil(status);
      const asMallory = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
      const err = await refusal(asMallory.updateNodeStatus({ nodeId: mallory.id, status }));
      asMallory.close();
      expect(err.code).toBe(Status.INVALID_ARGUMENT);
      expect(err.details).toStartWith(message);
      // Nothing was stored, and the owner is still served.
      expect((await cluster.store.node(mallory.id))!.value.status).toEqual(before);
      await ownerStillServed();
    });
  }

  test("an address the call did not come from is refused: a node cannot point the others at another machine", async () => {
    const asMallory = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
    const before = (await cluster.store.node(mallory.id))!.value.status;
    for (const elsewhere of ["10.0.0.7", "fd00::7", "192.168.1.1"]) {
      const err = await refusal(asMallory.updateNodeStatus({ nodeId: mallory.id, status: { ...good(), externalAddress: elsewhere } }));
      expect(err.code).toBe(Status.PERMISSION_DENIED);
      expect(err.details).toBe(`status.external_address: '${elsewhere}' is not the address this call came from (127.0.0.1); a node reports the address it dials the cluster from`);
    }
    asMallory.close();
    expect((await cluster.store.node(mallory.id))!.value.status).toEqual(before);
  });

  test("a good status is stored", async () => {
    const asMallory = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
    await asMallory.updateNodeStatus({ nodeId: mallory.id, status: good() });
    asMallory.close();
    expect((await cluster.store.node(mallory.id))!.value.status?.externalAddress).toBe("127.0.0.5");
  });
});

describe("other free-form input", () => {
  test("etcd credentials are refused for a non-canonical key", async () => {
    const management = cluster.client(Management, owner);
    const err = await refusal(management.getEtcdCredentials({ publicKey: new Uint8Array(32).fill(0xff) }));
    expect(err.code).toBe(Status.INVALID_ARGUMENT);
    expect(err.details).toBe("public_key: is not a canonical ed25519 public key");
    management.close();
  });

  test("node IDs that are not node IDs are refused before any lookup", async () => {
    const management = cluster.client(Management, owner);
    const err = await refusal(management.approveNode({ id: "../../ca/cluster" }));
    expect(err.code).toBe(Status.INVALID_ARGUMENT);
    expect(err.details).toBe("id: '../../ca/cluster' is not a node ID (node- and 16 hex digits)");
    management.close();
    const watcher = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
    const watchErr = await refusal(
      (async () => {
        for await (const _ of watcher.watch({ kind: { case: "nodeInCluster", value: { nodeId: "x\u001b" } } })) void _;
      })(),
    );
    expect(watchErr.code).toBe(Status.INVALID_ARGUMENT);
    watcher.close();
  });
});

describe("watchers", () => {
  test("2000 watchers share one etcd watch, each sees an update, and the hub lets go when they end", async () => {
    const hub = new NodeWatchHub(cluster.store);
    const controller = new AbortController();
    const seen = new Set<number>();
    const backlogs: number[] = [];
    const watchers = Array.from({ length: 2000 }, async (_, i) => {
      for await (const event of hub.subscribe({}, controller.signal)) {
        if (event.kind === "backlog") backlogs.push(event.nodes.length);
        if (event.kind === "put" && event.node.id === mallory.id && event.node.status?.version === "watched") seen.add(i);
      }
    });
    await eventually(() => expect(backlogs.length).toBe(2000));
    expect(hub.watching).toBe(true);
    const asMallory = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
    await asMallory.updateNodeStatus({ nodeId: mallory.id, status: { externalAddress: "127.0.0.5", timestampMs: BigInt(Date.now()), version: "watched" } });
    asMallory.close();
    await eventually(() => expect(seen.size).toBe(2000));
    controller.abort();
    await Promise.all(watchers);
    expect(hub.watchers).toBe(0);
    expect(hub.watching).toBe(false);
  }, 60_000);

  test("a watcher that stops reading is ended with RESOURCE_EXHAUSTED, and others go on", async () => {
    const hub = new NodeWatchHub(cluster.store, { maxQueuedEvents: 3 });
    const controller = new AbortController();
    const stalled = hub.subscribe({}, controller.signal)[Symbol.asyncIterator]();
    await stalled.next(); // backlog
    await stalled.next(); // backlog end
    const asMallory = cluster.client(Curator, { kind: "node", certificate: mallory.certificate, privateKey: mallory.key.privateKey });
    for (let i = 0; i < 5; i++) {
      await asMallory.updateNodeStatus({ nodeId: mallory.id, status: { externalAddress: "127.0.0.5", timestampMs: BigInt(Date.now()), version: `v${i}` } });
    }
    asMallory.close();
    const err = await stalled.next().then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(err).toBeInstanceOf(Error);
    expect((err as Error).message).toBe("this watcher fell 3 events behind; watch again");
    controller.abort();
  });

  test("watchers beyond the bound are refused with RESOURCE_EXHAUSTED", async () => {
    const hub = new NodeWatchHub(cluster.store, { maxWatchers: 1 });
    const controller = new AbortController();
    const first = hub.subscribe({}, controller.signal)[Symbol.asyncIterator]();
    await first.next();
    const second = hub.subscribe({}, controller.signal)[Symbol.asyncIterator]();
    await expect(second.next()).rejects.toThrow("this curator already serves 1 watchers");
    controller.abort();
    await first.next();
  });
});

describe("leadership after the curator restarts", () => {
  test("a campaign left by this node's earlier run is removed, and the curator leads without naming itself as another leader", async () => {
    await cluster.stopCurator(cluster.curatorPort);
    // The ghost of an earlier run: a campaign key for this node on a lease
    // that nobody keeps alive but that has not expired yet (as after etcd
    // was killed and restarted).
    const lease = cluster.store.etcd.lease(120, { autoKeepAlive: false });
    const leaseId = await lease.grant();
    await lease.put(`election/${ELECTION_NAME}/${leaseId}`).value(JSON.stringify({ nodeId: cluster.node.id, address: cluster.target }));
    const leadership: Value<Leadership> = cluster.restartFirstCurator();
    const states: Leadership[] = [];
    const watcher = leadership.watch();
    const collecting = (async () => {
      for await (const state of watcher) {
        states.push(state);
        if (state.isLeader) return;
      }
    })();
    await eventually(() => expect(leadership.peek()?.isLeader).toBe(true), { timeoutMs: 30_000 });
    await collecting;
    watcher[Symbol.dispose]();
    expect(states.filter((s) => !s.isLeader && s.leader?.nodeId === cluster.node.id)).toEqual([]);
    const management = cluster.client(Management, owner);
    await management.approveNode({ id: mallory.id });
    management.close();
    await lease.revoke().catch(() => {});
  }, 60_000);
});
