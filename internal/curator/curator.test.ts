// The curator over real etcd and real mutual TLS on loopback.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { AAA, Management, Node_Health } from "../../proto/gen/api/management_pb.ts";
import { NodeLabelSchema, NodeRolesSchema, NodeState, NodeStatusSchema } from "../../proto/gen/common/common_pb.ts";
import { create } from "@bufbuild/protobuf";
import { Curator, WatchEvent_Progress, type WatchEvent } from "../../proto/gen/curator/curator_pb.ts";
import { generateKeyPair, issueOwnerCertificate, nodeIdFromPublicKey, rawPublicKey, type KeyPair } from "../pki/mod.ts";
import { AlreadyExistsError, Status, type RpcError } from "../rpc/mod.ts";
import { eventually, freePort, testCA } from "../testing/mod.ts";
import { kubernetesKeys, loadKubernetesPKI } from "../kubernetes/mod.ts";
import { CuratorStore, ETCD_PREFIX, FencedError, NODES_PREFIX, wireguardKeyIndex } from "./store.ts";
import { SUPERVISION_LINE } from "./convert.ts";
import { WIREGUARD_KEY_CHANGES_PER_HOUR } from "./service_curator.ts";
import { MIN_BACKUP_EVERY_MINUTES } from "./service_management.ts";
import { MAX_BACKUP_ERROR_CHARS } from "./validate.ts";
import { etcdMembers, grantConsensus, holdConsensusJoins, LEARNER_CATCH_UP_MS, newConsensusJoins, ORPHAN_LEARNER_GRACE_MS, reconcileMembership, REJOIN_BACKOFF_MS } from "./consensus_membership.ts";
import { peerUrl } from "../consensus/mod.ts";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { captureLogger } from "../log/mod.ts";
import { enrolNode, refusal, startTestCluster, type TestCluster } from "./test_cluster.ts";
import { firstFreePodPrefix, parsePrefix } from "../clusternet/mod.ts";
import { x25519 } from "@noble/curves/ed25519.js";

let cluster: TestCluster;
let owner: { kind: "owner"; certificate: X509Certificate; privateKey: KeyPair["privateKey"] };

/**
 * Shorter than the product's 12 s, so that the health tests see timeouts
 * sooner; long enough that a loaded machine's stall does not time out a
 * node that beats every 100 ms, nor end a new leader's grace period (as long)
 * before the failover test has read it.
 */
const HEARTBEAT_TIMEOUT_MS = 5_000;

beforeAll(async () => {
  cluster = await startTestCluster({ heartbeatTimeoutMs: HEARTBEAT_TIMEOUT_MS });
}, 120_000);

afterAll(async () => {
  await cluster?.close();
});

const asNode = () => ({ kind: "node" as const, certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey });

describe("owner escrow", () => {
  test("the owner key gets an owner certificate under the cluster CA", async () => {
    const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
    const response = await aaa.escrow({});
    aaa.close();
    const certificate = new X509Certificate(response.ownerCertificate);
    const ca = new X509Certificate(response.caCertificate);
    expect(ca.fingerprint256).toBe(cluster.clusterCA.certificate.fingerprint256);
    expect(certificate.verify(ca.publicKey)).toBe(true);
    expect(certificate.subject).toContain("CN=owner");
    owner = { kind: "owner", certificate, privateKey: cluster.ownerKey.privateKey };
  });

  test("another key is refused", async () => {
    const aaa = cluster.client(AAA, { kind: "self-signed", key: generateKeyPair() });
    const err = await refusal(aaa.escrow({}));
    aaa.close();
    expect(err.code).toBe(Status.PERMISSION_DENIED);
    expect(err.details).toBe("the presented key is not the cluster owner's key");
  });

  test("a caller without any certificate is refused", async () => {
    const aaa = cluster.client(AAA, { kind: "none" });
    const err = await refusal(aaa.escrow({}));
    aaa.close();
    expect(err.code).toBe(Status.UNAUTHENTICATED);
  });
});

describe("management", () => {
  test("lists the bootstrap node as UP with the consensus role", async () => {
    const management = cluster.client(Management, owner);
    const nodes = [];
    for await (const node of management.getNodes({})) nodes.push(node);
    management.close();
    expect(nodes.length).toBe(1);
    expect(nodes[0]!.id).toBe(cluster.node.id);
    expect(nodes[0]!.state).toBe(NodeState.UP);
    expect(nodes[0]!.roles?.consensusMember).toBeDefined();
    expect(nodes[0]!.roles?.kubernetesController).toBeDefined();
  });

  test("cluster info names the curators and the CA, for owners and nodes", async () => {
    for (const as of [owner, asNode()]) {
      const management = cluster.client(Management, as);
      const info = await management.getClusterInfo({});
      management.close();
      expect(info.clusterDirectory?.nodes.map((n) => n.addresses[0]?.host)).toEqual([cluster.host]);
      expect(Buffer.from(info.caCertificate).equals(cluster.clusterCA.certificate.raw)).toBe(true);
    }
  });

  test("a node certificate cannot call owner methods", async () => {
    const management = cluster.client(Management, asNode());
    const err = await refusal(management.getRegisterTicket({}));
    management.close();
    expect(err.code).toBe(Status.PERMISSION_DENIED);
    expect(err.details).toBe("only the cluster owner may call this");
  });

  test("an owner certificate from another CA is refused", async () => {
    const other = testCA();
    const management = cluster.client(Management, { kind: "owner", certificate: issueOwnerCertificate(other, cluster.ownerKey.publicKey), privateKey: cluster.ownerKey.privateKey });
    const err = await refusal(
      (async () => {
        for await (const _ of management.getNodes({})) break;
      })(),
    );
    management.close();
    expect(err.code).toBe(Status.UNAUTHENTICATED);
    expect(err.details).toContain("not signed by the cluster CA");
  });

  test("approving or changing roles of an unknown node is NOT_FOUND, and a request naming nothing is INVALID_ARGUMENT", async () => {
    const management = cluster.client(Management, owner);
    const missing = await refusal(management.approveNode({ id: "node-0000000000000000" }));
    expect(missing.code).toBe(Status.NOT_FOUND);
    expect(missing.details).toBe("node node-0000000000000000 not found");
    const nothing = await refusal(management.updateNodeRoles({ kubernetesWorker: true }));
    expect(nothing.code).toBe(Status.INVALID_ARGUMENT);
    expect(nothing.details).toBe("name the node by id or by public key");
    management.close();
  });

  test("roles are set and unset on an UP node", async () => {
    const management = cluster.client(Management, owner);
    await management.updateNodeRoles({ id: cluster.node.id, kubernetesWorker: true });
    expect((await cluster.store.node(cluster.node.id))!.value.roles?.kubernetesWorker).toBeDefined();
    await management.updateNodeRoles({ id: cluster.node.id, kubernetesWorker: false });
    expect((await cluster.store.node(cluster.node.id))!.value.roles?.kubernetesWorker).toBeUndefined();
    const lastVoter = await refusal(management.updateNodeRoles({ id: cluster.node.id, consensusMember: false }));
    expect(lastVoter.code).toBe(Status.FAILED_PRECONDITION);
    expect(lastVoter.details).toContain("last voting etcd member");
    management.close();
  });
});

describe("Kubernetes credentials", () => {
  test("the owner gets a client certificate as nodecore:owner under the Kubernetes CA in etcd, and the controllers' apiservers", async () => {
    const management = cluster.client(Management, owner);
    const key = generateKeyPair();
    const response = await management.getKubernetesCredentials({ publicKey: rawPublicKey(key.publicKey) });
    management.close();
    const pki = await loadKubernetesPKI(kubernetesKeys(cluster.etcd));
    const ca = new X509Certificate(response.caCertificate);
    expect(ca.fingerprint256).toBe(pki!.ca.certificate.fingerprint256);
    const certificate = new X509Certificate(response.clientCertificate);
    expect(certificate.subject).toBe("CN=nodecore:owner");
    expect(certificate.verify(ca.publicKey)).toBe(true);
    expect(certificate.publicKey.export({ format: "der", type: "spki" })).toEqual(key.publicKey.export({ format: "der", type: "spki" }));
    // The bootstrap node is a controller and a consensus member, at the address its status gives.
    const record = (await cluster.store.node(cluster.node.id))!.value;
    expect(response.apiservers).toEqual([`https://${record.status!.externalAddress}:6443`]);
  });

  test("a node gets kubelet certificates only while it holds the kubernetes-worker role, named for itself and the addresses its certificate carries", async () => {
    const curator = cluster.client(Curator, asNode());
    const management = cluster.client(Management, owner);
    const kubelet = generateKeyPair();
    const withoutRole = await refusal(curator.issueKubeletCertificates({ kubeletPublicKey: rawPublicKey(kubelet.publicKey) }));
    expect(withoutRole.code).toBe(Status.PERMISSION_DENIED);
    expect(withoutRole.details).toBe(`node ${cluster.node.id} does not hold the kubernetes-worker role; only workers get kubelet certificates`);
    await management.updateNodeRoles({ id: cluster.node.id, kubernetesWorker: true });
    try {
      const response = await curator.issueKubeletCertificates({ kubeletPublicKey: rawPublicKey(kubelet.publicKey) });
      const ca = new X509Certificate(response.caCertificate);
      for (const der of [response.serverCertificate, response.clientCertificate]) {
        const certificate = new X509Certificate(der);
        expect(certificate.subject).toBe(`O=system:nodes\nCN=system:node:${cluster.node.id}`);
        expect(certificate.verify(ca.publicKey)).toBe(true);
        expect(certificate.publicKey.export({ format: "der", type: "spki" })).toEqual(kubelet.publicKey.export({ format: "der", type: "spki" }));
        // Short-lived: a node that loses the role loses its kubelet's identity within hours.
        expect(Date.parse(certificate.validTo) - Date.parse(certificate.validFrom)).toBe(2 * 3600 * 1000);
      }
      expect(new X509Certificate(response.serverCertificate).checkIP(cluster.host)).toBe(cluster.host);
      // kube-proxy's, over the same key, as the user the default RBAC makes the node proxier.
      const proxy = new X509Certificate(response.proxyClientCertificate);
      expect(proxy.subject).toBe("CN=system:kube-proxy");
      expect(proxy.verify(ca.publicKey)).toBe(true);
      expect(proxy.publicKey.export({ format: "der", type: "spki" })).toEqual(kubelet.publicKey.export({ format: "der", type: "spki" }));
      const dns = new X509Certificate(response.dnsClientCertificate);
      expect(dns.subject).toBe("CN=nodecore:cluster-dns");
      expect(dns.verify(ca.publicKey)).toBe(true);
      const bad = await refusal(curator.issueKubeletCertificates({ kubeletPublicKey: new Uint8Array(31) }));
      expect(bad.code).toBe(Status.INVALID_ARGUMENT);
      expect(bad.details).toContain("kubelet_public_key");
      // The owner is not a node.
      const asOwner = cluster.client(Curator, owner);
      expect((await refusal(asOwner.issueKubeletCertificates({ kubeletPublicKey: rawPublicKey(kubelet.publicKey) }))).code).toBe(Status.PERMISSION_DENIED);
      asOwner.close();
    } finally {
      await management.updateNodeRoles({ id: cluster.node.id, kubernetesWorker: false });
      management.close();
      curator.close();
    }
  });
});

describe("the scheduled backups' status", () => {
  // The backups worker on the node the schedule names used to write the
  // status key into etcd itself, unfenced, from whichever node it ran on.
  test("only the node the schedule names reports it; the caller is checked before the fields, the fields are bounded, and the leader records it for ctl cluster info", async () => {
    const curator = cluster.client(Curator, asNode());
    const management = cluster.client(Management, owner);
    const other = await enrolNode(cluster, owner);
    const asOther = cluster.client(Curator, other);
    const asOwner = cluster.client(Curator, owner);
    const status = { last: { file: "/data/backups/1-r7.backup", timeMs: BigInt(Date.now()), etcdRevision: 7n, bytes: 4096n }, lastError: "" };
    try {
      // No schedule: nobody reports.
      const unscheduled = await refusal(curator.reportBackupStatus({ status }));
      expect(unscheduled.code).toBe(Status.PERMISSION_DENIED);
      expect(unscheduled.details).toBe(`only the node the backup schedule names reports its backups (caller is ${cluster.node.id}; the schedule names no node)`);
      await management.setBackupSchedule({ schedule: { everyMinutes: MIN_BACKUP_EVERY_MINUTES, keep: 2, nodeId: cluster.node.id } });
      // Another node, even with a bad status: refused for who it is, before its fields are read.
      const stranger = await refusal(asOther.reportBackupStatus({ status: { ...status, lastError: "\u001b]0;owned\u0007" } }));
      expect(stranger.code).toBe(Status.PERMISSION_DENIED);
      expect(stranger.details).toContain(`caller is ${other.id}; the schedule names '${cluster.node.id}'`);
      expect((await refusal(asOwner.reportBackupStatus({ status }))).code).toBe(Status.PERMISSION_DENIED);
      // The named node's bad fields: one line naming the field, nothing stored.
      for (const [bad, field] of [
        [{ ...status, lastError: "\u001b]0;owned\u0007" }, "status.last_error"],
        [{ ...status, lastError: "x".repeat(MAX_BACKUP_ERROR_CHARS + 1) }, "status.last_error"],
        [{ ...status, nodeId: other.id }, "status.node_id"],
        [{ ...status, last: { ...status.last, file: "/data/\u202ebackup" } }, "status.last.file"],
      ] as const) {
        const refused = await refusal(curator.reportBackupStatus({ status: bad }));
        expect(refused.code).toBe(Status.INVALID_ARGUMENT);
        expect(refused.details).toStartWith(`${field}: `);
      }
      expect((await management.getClusterInfo({})).backupStatus).toBeUndefined();
      // As told, with the caller as its node.
      await curator.reportBackupStatus({ status: { ...status, lastError: "the target answered 507", lastErrorMs: 5n } });
      const info = await management.getClusterInfo({});
      expect(info.backupStatus?.nodeId).toBe(cluster.node.id);
      expect(info.backupStatus?.last?.file).toBe(status.last.file);
      expect(info.backupStatus?.lastError).toBe("the target answered 507");
    } finally {
      await management.setBackupSchedule({ schedule: { everyMinutes: 0 } });
      for (const client of [curator, management, asOther, asOwner]) client.close();
    }
  });
});

describe("cluster network", () => {
  const wireguardKey = () => x25519.getPublicKey(x25519.utils.randomSecretKey());

  test("a worker reports its WireGuard key and gets a pod prefix, the same one ever after; others are refused, naming why", async () => {
    const curator = cluster.client(Curator, asNode());
    const management = cluster.client(Management, owner);
    try {
      const notWorker = await refusal(curator.updateNodeClusterNetworking({ wireguardPublicKey: wireguardKey() }));
      expect(notWorker.code).toBe(Status.FAILED_PRECONDITION);
      expect(notWorker.details).toBe(`node ${cluster.node.id} does not hold the kubernetes-worker role; only workers join the cluster network`);
      await management.updateNodeRoles({ id: cluster.node.id, kubernetesWorker: true });
      const zero = await refusal(curator.updateNodeClusterNetworking({ wireguardPublicKey: new Uint8Array(32) }));
      expect(zero.code).toBe(Status.INVALID_ARGUMENT);
      expect(zero.details).toBe("wireguard_public_key: is not a valid Curve25519 public key (a low-order point)");
      const first = await curator.updateNodeClusterNetworking({ wireguardPublicKey: wireguardKey() });
      expect(first.podPrefix).toMatch(/^10\.244\.\d+\.0\/24$/);
      // A new key (the node's data was wiped) keeps the prefix, and every watcher sees the key.
      const rotated = wireguardKey();
      expect((await curator.updateNodeClusterNetworking({ wireguardPublicKey: rotated })).podPrefix).toBe(first.podPrefix);
      const record = (await cluster.store.node(cluster.node.id))!.value;
      expect(record.clusterNetworking?.wireguardPublicKey).toEqual(rotated);
      expect(await cluster.store.heldPodPrefixes()).toContain(first.podPrefix);
      const watch = curator.watch({ kind: { case: "nodeInCluster", value: { nodeId: cluster.node.id } } })[Symbol.asyncIterator]();
      const backlog = (await watch.next()).value as WatchEvent;
      expect(backlog.nodes[0]?.clusterNetworking).toMatchObject({ wireguardPublicKey: rotated, podPrefix: first.podPrefix });
      await watch.return?.();
      // The same key again is free; new keys are bounded (one was used above).
      for (let i = 0; i < 3; i++) await curator.updateNodeClusterNetworking({ wireguardPublicKey: rotated });
      for (let i = 1; i < WIREGUARD_KEY_CHANGES_PER_HOUR; i++) await curator.updateNodeClusterNetworking({ wireguardPublicKey: wireguardKey() });
      const tooMany = await refusal(curator.updateNodeClusterNetworking({ wireguardPublicKey: wireguardKey() }));
      expect(tooMany.code).toBe(Status.RESOURCE_EXHAUSTED);
      expect(tooMany.details).toMatch(
        new RegExp(`^node ${cluster.node.id} changed its WireGuard key ${WIREGUARD_KEY_CHANGES_PER_HOUR} times in the last hour, the most allowed; try again in \\d+ s$`),
      );
      // The owner is no node.
      const asOwner = cluster.client(Curator, owner);
      expect((await refusal(asOwner.updateNodeClusterNetworking({ wireguardPublicKey: rotated }))).code).toBe(Status.PERMISSION_DENIED);
      asOwner.close();
    } finally {
      await management.updateNodeRoles({ id: cluster.node.id, kubernetesWorker: false });
      management.close();
      curator.close();
    }
  });

  test("nodes assigned at once get distinct prefixes, lowest free first, and a deleted node's prefix is free again", async () => {
    const store = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX));
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) {
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      const created = await store.createNode(create(NodeRecordSchema, { id, publicKey: rawPublicKey(key.publicKey), joinKey: rawPublicKey(generateKeyPair().publicKey), state: NodeState.UP }));
      expect(created).toBe("created");
      ids.push(id);
    }
    const before = await store.heldPodPrefixes();
    const choose = (taken: ReadonlySet<string>) => firstFreePodPrefix(taken)!;
    const records = await Promise.all(ids.map((id) => store.assignClusterNetworking(id, wireguardKey(), choose)));
    const prefixes = records.map((r) => r.clusterNetworking!.podPrefix);
    expect(new Set(prefixes).size).toBe(4);
    for (const prefix of prefixes) expect(before.has(prefix)).toBe(false);
    const held = await store.heldPodPrefixes();
    for (const prefix of prefixes) expect(held.has(prefix)).toBe(true);
    // The node deleted gives its prefix back, in the same transaction; the next node takes it (the lowest free).
    const lowest = [...prefixes].sort((a, b) => parsePrefix(a)!.base - parsePrefix(b)!.base)[0]!;
    const holder = ids[prefixes.indexOf(lowest)]!;
    expect(await store.deleteNode(holder, () => {})).toBe("deleted");
    expect((await store.heldPodPrefixes()).has(lowest)).toBe(false);
    const key = generateKeyPair();
    const next = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
    await store.createNode(create(NodeRecordSchema, { id: next, publicKey: rawPublicKey(key.publicKey), joinKey: rawPublicKey(generateKeyPair().publicKey), state: NodeState.UP }));
    expect((await store.assignClusterNetworking(next, wireguardKey(), choose)).clusterNetworking!.podPrefix).toBe(lowest);
    for (const id of [...ids.filter((i) => i !== holder), next]) await store.deleteNode(id, () => {});
  });

  test("a WireGuard key is one node's: another node's key is refused (by its index, or by a record from before the index), the same key again writes nothing, a changed or deleted node frees its old key", async () => {
    const store = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX));
    const made = async () => {
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      await store.createNode(create(NodeRecordSchema, { id, publicKey: rawPublicKey(key.publicKey), joinKey: rawPublicKey(generateKeyPair().publicKey), state: NodeState.UP }));
      return id;
    };
    const [a, b] = [await made(), await made()];
    const choose = (taken: ReadonlySet<string>) => firstFreePodPrefix(taken)!;
    const aKey = wireguardKey();
    await store.assignClusterNetworking(a, aKey, choose);
    const refusal = (id: string, key: Uint8Array) =>
      store.assignClusterNetworking(id, key, choose).then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(await refusal(b, aKey)).toBeInstanceOf(AlreadyExistsError);
    expect((await store.node(b))!.value.clusterNetworking).toBeUndefined();
    // Sent again: nothing is written (the record's revision stays).
    const revision = (await store.node(a))!.modRevision;
    await store.assignClusterNetworking(a, aKey, choose);
    expect((await store.node(a))!.modRevision).toBe(revision);
    // a changes its key: the old one is free, and b may take it.
    await store.assignClusterNetworking(a, wireguardKey(), choose);
    await store.assignClusterNetworking(b, aKey, choose);
    // A record from before the index (its claim key absent) still holds its key.
    const bKey = (await store.node(b))!.value.clusterNetworking!.wireguardPublicKey;
    await cluster.etcd.namespace(ETCD_PREFIX).delete().key(wireguardKeyIndex(bKey));
    expect(await refusal(a, bKey)).toBeInstanceOf(AlreadyExistsError);
    // b's next call writes its claim; b deleted frees it.
    await store.assignClusterNetworking(b, bKey, choose);
    expect(await cluster.etcd.namespace(ETCD_PREFIX).get(wireguardKeyIndex(bKey)).string()).toBe(b);
    await store.deleteNode(b, () => {});
    expect(await cluster.etcd.namespace(ETCD_PREFIX).get(wireguardKeyIndex(bKey)).string()).toBeNull();
    await store.assignClusterNetworking(a, bKey, choose);
    await store.deleteNode(a, () => {});
  }, 30_000);
});

describe("register, approve, commit, join", () => {
  const newNode = generateKeyPair();
  const joinKey = generateKeyPair();
  const newId = nodeIdFromPublicKey(rawPublicKey(newNode.publicKey));
  let nodeCertificate: X509Certificate;

  test("a wrong ticket is refused", async () => {
    const curator = cluster.client(Curator, { kind: "self-signed", key: newNode });
    const err = await refusal(curator.registerNode({ registerTicket: new Uint8Array([1, 2, 3]), joinKey: rawPublicKey(joinKey.publicKey) }));
    curator.close();
    expect(err.code).toBe(Status.PERMISSION_DENIED);
    expect(err.details).toBe("wrong register ticket");
  });

  test("a node registers with the ticket, cannot commit before approval, and is UP after it", async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    const curator = cluster.client(Curator, { kind: "self-signed", key: newNode });
    await curator.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) });
    // Registering twice (a retry) is harmless.
    await curator.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) });
    expect((await cluster.store.node(newId))!.value.state).toBe(NodeState.NEW);

    const unlockKey = new Uint8Array(32).fill(9);
    const early = await refusal(curator.commitNode({ clusterUnlockKey: unlockKey }));
    expect(early.code).toBe(Status.FAILED_PRECONDITION);
    expect(early.details).toBe(`node ${newId} is waiting for the owner's approval`);

    await management.approveNode({ publicKey: rawPublicKey(newNode.publicKey) });
    expect((await cluster.store.node(newId))!.value.state).toBe(NodeState.STANDBY);
    const committed = await curator.commitNode({ clusterUnlockKey: unlockKey });
    nodeCertificate = new X509Certificate(committed.nodeCertificate);
    expect(nodeCertificate.subject).toContain(`CN=${newId}`);
    expect(nodeCertificate.verify(cluster.clusterCA.certificate.publicKey)).toBe(true);
    expect((await cluster.store.node(newId))!.value.state).toBe(NodeState.UP);

    const otherKey = await refusal(curator.commitNode({ clusterUnlockKey: new Uint8Array(32).fill(1) }));
    expect(otherKey.code).toBe(Status.ALREADY_EXISTS);
    curator.close();
    management.close();
  });

  test("a node updates only its own status", async () => {
    const curator = cluster.client(Curator, { kind: "node", certificate: nodeCertificate, privateKey: newNode.privateKey });
    await curator.updateNodeStatus({ nodeId: newId, status: { externalAddress: "127.0.0.9", timestampMs: BigInt(Date.now()) } });
    expect((await cluster.store.node(newId))!.value.status?.externalAddress).toBe("127.0.0.9");
    const other = await refusal(curator.updateNodeStatus({ nodeId: cluster.node.id, status: { externalAddress: "1.2.3.4" } }));
    expect(other.code).toBe(Status.PERMISSION_DENIED);
    expect(other.details).toContain("a node may only update its own status");
    curator.close();
  });

  test("the owner cannot act as a node", async () => {
    const curator = cluster.client(Curator, owner);
    const err = await refusal(curator.updateNodeStatus({ nodeId: cluster.node.id, status: {} }));
    curator.close();
    expect(err.code).toBe(Status.PERMISSION_DENIED);
    expect(err.details).toBe("only cluster nodes may call this");
  });

  test("join returns the cluster unlock key to the holder of the join key only", async () => {
    const curator = cluster.client(Curator, { kind: "self-signed", key: joinKey });
    const { clusterUnlockKey } = await curator.joinNode({});
    curator.close();
    expect([...clusterUnlockKey]).toEqual(new Array(32).fill(9));
    const stranger = cluster.client(Curator, { kind: "self-signed", key: generateKeyPair() });
    const err = await refusal(stranger.joinNode({}));
    stranger.close();
    expect(err.code).toBe(Status.NOT_FOUND);
    expect(err.details).toBe("no node has this join key");
  });
});

describe("labels", () => {
  test("the owner upserts and deletes labels; the node list shows them sorted", async () => {
    const management = cluster.client(Management, owner);
    const id = cluster.node.id;
    const first = await management.updateNodeLabels({
      id,
      upsert: [
        { key: "zone", value: "a" },
        { key: "example.com/rack", value: "7" },
      ],
    });
    expect(first.labels.map((l) => `${l.key}=${l.value}`)).toEqual(["example.com/rack=7", "zone=a"]);
    const second = await management.updateNodeLabels({ id, upsert: [{ key: "zone", value: "b" }], delete: ["example.com/rack", "never-set"] });
    expect(second.labels.map((l) => `${l.key}=${l.value}`)).toEqual(["zone=b"]);
    const listed = [];
    for await (const node of management.getNodes({})) listed.push(node);
    expect(listed.find((n) => n.id === id)!.labels.map((l) => `${l.key}=${l.value}`)).toEqual(["zone=b"]);
    await management.updateNodeLabels({ id, delete: ["zone"] });
    management.close();
  });

  test("bad labels and unknown nodes are refused, naming what is wrong", async () => {
    const management = cluster.client(Management, owner);
    const bad = await refusal(management.updateNodeLabels({ id: cluster.node.id, upsert: [{ key: "-zone", value: "a" }] }));
    expect(bad.code).toBe(Status.INVALID_ARGUMENT);
    expect(bad.details).toStartWith("upsert[0].key:");
    const unknown = await refusal(management.updateNodeLabels({ id: "node-00000000000000aa", upsert: [{ key: "zone", value: "a" }] }));
    expect(unknown.code).toBe(Status.NOT_FOUND);
    management.close();
  });

  test("a write fenced on a term that has ended, or on no term, is refused and changes nothing", async () => {
    const id = cluster.node.id;
    const before = (await cluster.store.node(id))!.modRevision;
    const failure = (promise: Promise<unknown>) =>
      promise.then(
        () => new Error("the write went through"),
        (err: unknown) => err as Error,
      );
    const ended = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX), { fence: () => "election/curator-leader/7fffffffffffffff" });
    const endedError = await failure(ended.updateNode(id, (r) => r));
    expect(endedError).toBeInstanceOf(FencedError);
    expect(endedError.message).toBe("this curator's term as leader ended during the write; whether the write was made is not known");
    const none = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX), { fence: () => undefined });
    const noneError = await failure(none.updateNode(id, (r) => r));
    expect(noneError).toBeInstanceOf(FencedError);
    expect(noneError.message).toBe("this curator is not the leader; the write was not made");
    expect((await cluster.store.node(id))!.modRevision).toBe(before);
    // The live leader's fence lets the same write through.
    const fence = cluster.leadership.peek()?.fenceKey;
    expect(fence).toStartWith("election/curator-leader/");
    const leading = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX), { fence: () => fence });
    await leading.updateNode(id, (r) => r);
    expect((await cluster.store.node(id))!.modRevision).not.toBe(before);
  });

  test("updates of one record queue instead of racing: none is lost, each commits at its first attempt; a caller that gave up gets no write", async () => {
    const id = cluster.node.id;
    const store = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX));
    let attempts = 0;
    await Promise.all(
      Array.from({ length: 12 }, (_, i) =>
        store.updateNode(id, (r) => {
          attempts++;
          r.labels = [...r.labels.filter((l) => l.key !== `queue-${i}`), create(NodeLabelSchema, { key: `queue-${i}`, value: "x" })].sort((a, b) => a.key.localeCompare(b.key));
          return r;
        }),
      ),
    );
    expect(attempts).toBe(12);
    const labels = (await store.node(id))!.value.labels.map((l) => l.key).filter((k) => k.startsWith("queue-"));
    expect(labels.length).toBe(12);
    const before = (await store.node(id))!.modRevision;
    const gaveUp = new AbortController();
    gaveUp.abort(new Error("the caller's deadline passed"));
    let refused: unknown;
    try {
      await store.updateNode(id, (r) => r, gaveUp.signal);
    } catch (err) {
      refused = err;
    }
    expect((refused as Error).message).toBe("the caller's deadline passed");
    expect((await store.node(id))!.modRevision).toBe(before);
  });
});

describe("health and removal", () => {
  const key = generateKeyPair();
  const joinKey = generateKeyPair();
  const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
  let certificate: X509Certificate;
  const healthOf = async (nodeId: string) => {
    const management = cluster.client(Management, owner);
    try {
      for await (const node of management.getNodes({})) if (node.id === nodeId) return node;
      return undefined;
    } finally {
      management.close();
    }
  };

  beforeAll(async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    const curator = cluster.client(Curator, { kind: "self-signed", key });
    await curator.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) });
    await management.approveNode({ id });
    certificate = new X509Certificate((await curator.commitNode({ clusterUnlockKey: new Uint8Array(32).fill(3) })).nodeCertificate);
    curator.close();
    management.close();
  });

  test("a node that sends heartbeats is HEALTHY, and HEARTBEAT_TIMEOUT once it falls silent", async () => {
    const curator = cluster.client(Curator, { kind: "node", certificate, privateKey: key.privateKey });
    const stop = new AbortController();
    async function* beats() {
      while (!stop.signal.aborted) {
        yield {};
        await Bun.sleep(100);
      }
    }
    let answers = 0;
    const stream = (async () => {
      for await (const _ of curator.heartbeat(beats(), { signal: stop.signal })) answers++;
    })().catch(() => {});
    await eventually(async () => expect((await healthOf(id))?.health).toBe(Node_Health.HEALTHY));
    expect(answers).toBeGreaterThan(0);
    const healthy = (await healthOf(id))!;
    expect(Number(healthy.timeSinceHeartbeatMs)).toBeLessThan(HEARTBEAT_TIMEOUT_MS);
    // Heartbeats arrive, but the node says its etcd keeps failing: DEGRADED, in its words; HEALTHY again once it says ok.
    const report = (state: string, message: string) =>
      curator.updateNodeStatus({ nodeId: id, status: { externalAddress: "127.0.0.1", timestampMs: BigInt(Date.now()), version: "test", services: [{ name: SUPERVISION_LINE, state, message }] } });
    await report("degraded", "root.roleserve.controlplane.consensus keeps failing (4 restarts; last: etcd exited with code 1)");
    const degraded = (await healthOf(id))!;
    expect(Node_Health[degraded.health]).toBe("DEGRADED");
    expect(degraded.healthReason).toBe("root.roleserve.controlplane.consensus keeps failing (4 restarts; last: etcd exited with code 1)");
    await report("ok", "no runnable is failing");
    expect(Node_Health[(await healthOf(id))!.health]).toBe("HEALTHY");
    expect((await healthOf(id))!.healthReason).toBe("");
    // A line in the failing state (etcd out of its quota) is DEGRADED too, named by its line.
    await curator.updateNodeStatus({
      nodeId: id,
      status: {
        externalAddress: "127.0.0.1",
        timestampMs: BigInt(Date.now()),
        version: "test",
        services: [
          { name: SUPERVISION_LINE, state: "ok", message: "no runnable is failing" },
          { name: "etcd", state: "failing", message: "member 1, alarms: NOSPACE on 1" },
          { name: "kubelet", state: "running", message: "" },
        ],
      },
    });
    expect(Node_Health[(await healthOf(id))!.health]).toBe("DEGRADED");
    expect((await healthOf(id))!.healthReason).toBe("etcd: member 1, alarms: NOSPACE on 1");
    await report("ok", "no runnable is failing");
    expect(Node_Health[(await healthOf(id))!.health]).toBe("HEALTHY");
    stop.abort();
    await stream;
    curator.close();
    await eventually(async () => expect((await healthOf(id))?.health).toBe(Node_Health.HEARTBEAT_TIMEOUT), { timeoutMs: 20_000 });
    expect(Number((await healthOf(id))!.timeSinceHeartbeatMs)).toBeGreaterThan(HEARTBEAT_TIMEOUT_MS);
  }, 60_000);

  test("the owner cannot send heartbeats as a node", async () => {
    const asOwner = cluster.client(Curator, owner);
    const refusedOwner = await refusal(
      (async () => {
        for await (const _ of asOwner.heartbeat(
          (async function* () {
            yield {};
          })(),
        ))
          return;
      })(),
    );
    asOwner.close();
    expect(refusedOwner.code).toBe(Status.PERMISSION_DENIED);
  });

  test("a consensus member cannot be deleted; another node can, and then can neither join nor call as a node, and its open streams end", async () => {
    const management = cluster.client(Management, owner);
    const member = await refusal(management.deleteNode({ id: cluster.node.id }));
    expect(member.code).toBe(Status.FAILED_PRECONDITION);
    expect(member.details).toContain("is a consensus member; take the role away first");

    // The node's streams, open before the deletion: a watch of every node, and its heartbeats.
    const asNode = cluster.client(Curator, { kind: "node", certificate, privateKey: key.privateKey });
    const openWatch = asNode.watch({ kind: { case: "nodesInCluster", value: {} } })[Symbol.asyncIterator]();
    expect((await openWatch.next()).done).toBe(false);
    const beating = new AbortController();
    const openBeats = asNode
      .heartbeat(
        (async function* () {
          while (!beating.signal.aborted) {
            yield {};
            await Bun.sleep(100); // a node's heartbeat pace, shortened
          }
        })(),
      )
      [Symbol.asyncIterator]();
    expect((await openBeats.next()).done).toBe(false);
    const endOf = (stream: AsyncIterator<unknown>) =>
      refusal(
        (async () => {
          while (!(await stream.next()).done);
        })(),
      );

    await management.deleteNode({ id });
    for (const ended of [await endOf(openWatch), await endOf(openBeats)]) {
      expect(ended.code).toBe(Status.PERMISSION_DENIED);
      expect(ended.details).toBe(`node ${id} is not part of the cluster (it was deleted)`);
    }
    beating.abort();
    asNode.close();
    expect(await healthOf(id)).toBeUndefined();
    const again = await refusal(management.deleteNode({ id }));
    expect(again.code).toBe(Status.NOT_FOUND);
    management.close();

    const joining = cluster.client(Curator, { kind: "self-signed", key: joinKey });
    const join = await refusal(joining.joinNode({}));
    joining.close();
    expect(join.code).toBe(Status.NOT_FOUND);
    expect(join.details).toBe("no node has this join key");

    // Its certificate is still signed by the CA, but the cluster's records no longer know it.
    const asDeleted = cluster.client(Curator, { kind: "node", certificate, privateKey: key.privateKey });
    const watch = await refusal(
      (async () => {
        for await (const _ of asDeleted.watch({ kind: { case: "nodesInCluster", value: {} } })) return;
      })(),
    );
    expect(watch.code).toBe(Status.PERMISSION_DENIED);
    expect(watch.details).toBe(`node ${id} is not part of the cluster (it was deleted)`);
    const beat = await refusal(
      (async () => {
        for await (const _ of asDeleted.heartbeat(
          (async function* () {
            yield {};
          })(),
        ))
          return;
      })(),
    );
    expect(beat.code).toBe(Status.PERMISSION_DENIED);
    asDeleted.close();
    // Nor does it read the cluster's directory, join keys and CA any more.
    const infoAsDeleted = cluster.client(Management, { kind: "node", certificate, privateKey: key.privateKey });
    const info = await refusal(infoAsDeleted.getClusterInfo({}));
    infoAsDeleted.close();
    expect(info.code).toBe(Status.PERMISSION_DENIED);
    expect(info.details).toBe(`node ${id} is not part of the cluster (it was deleted)`);
  });

  test("a deleted node cannot register again, by its node key or its join key, until the owner undeletes it", async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    const again = cluster.client(Curator, { kind: "self-signed", key });
    const byKey = await refusal(again.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(generateKeyPair().publicKey) }));
    expect(byKey.code).toBe(Status.PERMISSION_DENIED);
    expect(byKey.details).toBe(`node ${id} was deleted from the cluster; the owner can let it register again (ctl node undelete ${id})`);
    const newcomer = cluster.client(Curator, { kind: "self-signed", key: generateKeyPair() });
    const byJoinKey = await refusal(newcomer.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) }));
    newcomer.close();
    expect(byJoinKey.code).toBe(Status.PERMISSION_DENIED);
    expect(byJoinKey.details).toContain(`this join key belonged to node ${id}, which was deleted`);
    expect((await refusal(management.undeleteNode({ id: cluster.node.id }))).code).toBe(Status.NOT_FOUND);

    await management.undeleteNode({ id });
    await again.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) });
    again.close();
    expect((await healthOf(id))?.state).toBe(NodeState.NEW);
    await management.deleteNode({ id });
    management.close();
  });

  test("a registration that never committed can be deleted", async () => {
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    const stray = generateKeyPair();
    const strayId = nodeIdFromPublicKey(rawPublicKey(stray.publicKey));
    const curator = cluster.client(Curator, { kind: "self-signed", key: stray });
    await curator.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(generateKeyPair().publicKey) });
    curator.close();
    expect((await healthOf(strayId))?.state).toBe(NodeState.NEW);
    expect((await healthOf(strayId))?.health).toBe(Node_Health.UNKNOWN);
    await management.deleteNode({ publicKey: rawPublicKey(stray.publicKey) });
    expect(await healthOf(strayId)).toBeUndefined();
    management.close();
  });
});

describe("races a client can start", () => {
  test("approving and committing a node while the owner deletes it never reach a caller as INTERNAL", async () => {
    const management = cluster.client(Management, owner);
    const codes = new Set<string>();
    for (let round = 0; round < 8; round++) {
      const { ticket } = await management.getRegisterTicket({});
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      const curator = cluster.client(Curator, { kind: "self-signed", key });
      await curator.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(generateKeyPair().publicKey) });
      if (round % 2 === 1) await management.approveNode({ id });
      const outcomes = await Promise.allSettled([
        round % 2 === 0 ? management.approveNode({ id }) : curator.commitNode({ clusterUnlockKey: new Uint8Array(32).fill(round) }),
        management.deleteNode({ id }),
      ]);
      curator.close();
      for (const outcome of outcomes) {
        if (outcome.status === "fulfilled") continue;
        const err = outcome.reason as RpcError;
        codes.add(Status[err.code]!);
        expect(`${Status[err.code]}: ${err.details}`).not.toMatch(/^(INTERNAL|UNKNOWN)/);
      }
    }
    management.close();
    // Whatever lost its race was told so in a code that means it.
    for (const code of codes) expect(["NOT_FOUND", "ABORTED", "FAILED_PRECONDITION", "PERMISSION_DENIED"]).toContain(code);
  });
});

describe("watch", () => {
  test("sends the backlog, a marker, then updates and deletions, until cancelled", async () => {
    const curator = cluster.client(Curator, asNode());
    const controller = new AbortController();
    const events: WatchEvent[] = [];
    const done = (async () => {
      try {
        for await (const event of curator.watch({ kind: { case: "nodesInCluster", value: {} } }, { signal: controller.signal })) events.push(event);
      } catch (err) {
        if (!controller.signal.aborted) throw err;
      }
    })();
    await eventually(() => expect(events.some((e) => e.progress === WatchEvent_Progress.LAST_BACKLOGGED)).toBe(true));
    const backlog = events
      .slice(
        0,
        events.findIndex((e) => e.progress === WatchEvent_Progress.LAST_BACKLOGGED),
      )
      .flatMap((e) => e.nodes.map((n) => n.id));
    expect(backlog).toContain(cluster.node.id);
    // An update and a deletion, written straight to etcd.
    const temp = generateKeyPair();
    const tempId = nodeIdFromPublicKey(rawPublicKey(temp.publicKey));
    const management = cluster.client(Management, owner);
    const { ticket } = await management.getRegisterTicket({});
    management.close();
    const registrar = cluster.client(Curator, { kind: "self-signed", key: temp });
    await registrar.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(generateKeyPair().publicKey) });
    registrar.close();
    await eventually(() => expect(events.some((e) => e.nodes.some((n) => n.id === tempId && n.state === NodeState.NEW))).toBe(true));
    await cluster.store.etcd.delete().key(NODES_PREFIX + tempId);
    await eventually(() => expect(events.some((e) => e.nodeTombstones.some((t) => t.nodeId === tempId))).toBe(true));
    controller.abort();
    await done;
    curator.close();
  });

  test("one node can be watched by ID, and the watch shows none of the others", async () => {
    const curator = cluster.client(Curator, asNode());
    const controller = new AbortController();
    const ids: string[] = [];
    for await (const event of curator.watch({ kind: { case: "nodeInCluster", value: { nodeId: cluster.node.id } } }, { signal: controller.signal })) {
      ids.push(...event.nodes.map((n) => n.id));
      if (event.progress === WatchEvent_Progress.LAST_BACKLOGGED) break;
    }
    curator.close();
    expect(ids).toEqual([cluster.node.id]);
  });
});

describe("leader election", () => {
  test("a second curator refuses writes naming the leader, and takes over when the leader stops", async () => {
    const secondPort = await freePort();
    const { leadership: second, endpoint } = await cluster.addCurator(secondPort);
    await eventually(() => expect(second.peek()?.leader?.address).toBe(cluster.target), { timeoutMs: 20_000 });
    expect(second.peek()?.isLeader).toBe(false);
    const management = cluster.client(Management, owner, endpoint);
    const err = await refusal(management.approveNode({ id: cluster.node.id }));
    expect(err.code).toBe(Status.UNAVAILABLE);
    expect(err.details).toBe(`this curator is not the leader; the leader is ${cluster.node.id} at ${cluster.target}`);
    // Reads are served by any curator, except node health: only the leader hears heartbeats.
    expect((await management.getClusterInfo({})).caCertificate.length).toBeGreaterThan(0);
    const list = await refusal(
      (async () => {
        for await (const _ of management.getNodes({})) return;
      })(),
    );
    expect(list.code).toBe(Status.UNAVAILABLE);
    expect(list.trailers?.["nodecore-leader"]).toBe(`${cluster.node.id}@${cluster.target}`);
    const asNode = cluster.client(Curator, { kind: "node", certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey }, endpoint);
    const beat = await refusal(
      (async () => {
        for await (const _ of asNode.heartbeat(
          (async function* () {
            yield {};
          })(),
        ))
          return;
      })(),
    );
    asNode.close();
    expect(beat.code).toBe(Status.UNAVAILABLE);

    await cluster.stopCurator(cluster.curatorPort);
    await eventually(() => expect(second.peek()?.isLeader).toBe(true), { timeoutMs: 30_000 });
    await management.approveNode({ id: cluster.node.id });
    // A new leader has heard no heartbeats yet: the nodes are UNKNOWN until
    // the grace period ends, not timed out.
    const nodes = [];
    for await (const node of management.getNodes({})) nodes.push(node);
    expect(nodes.find((n) => n.id === cluster.node.id)?.health).toBe(Node_Health.UNKNOWN);
    management.close();
  }, 60_000);
});

describe("etcd's members held against the consensus roles", () => {
  test("a learner no role accounts for (a grant interrupted halfway) is removed after its grace, and the last voter never is", async () => {
    const { logger } = captureLogger("test");
    const firstSeen = new Map<string, number>();
    const { nodes } = await cluster.store.nodes();
    // A learner added as a grant would, whose node never got the role and never starts.
    await cluster.etcd.cluster.memberAdd({ peerURLs: ["https://127.0.0.99:2380"], isLearner: true });
    const learners = async () => (await etcdMembers(cluster.etcd)).filter((m) => m.isLearner);
    expect((await learners()).length).toBe(1);
    const t0 = Date.now();
    expect(await reconcileMembership(cluster.etcd, nodes, logger, firstSeen, t0)).toEqual([]);
    expect(await reconcileMembership(cluster.etcd, nodes, logger, firstSeen, t0 + ORPHAN_LEARNER_GRACE_MS - 1)).toEqual([]);
    expect((await learners()).length).toBe(1);
    const removed = await reconcileMembership(cluster.etcd, nodes, logger, firstSeen, t0 + ORPHAN_LEARNER_GRACE_MS);
    expect(removed.length).toBe(1);
    expect(await learners()).toEqual([]);
    // Records that give nobody the consensus role: the one voter stays all the same.
    const roleless = nodes.map((n) => create(NodeRecordSchema, { id: n.id, publicKey: n.publicKey, state: n.state, ...(n.status ? { status: n.status } : {}) }));
    expect(await reconcileMembership(cluster.etcd, roleless, logger, firstSeen)).toEqual([]);
    expect((await etcdMembers(cluster.etcd)).length).toBe(1);
  });
  test("a learner whose node holds the role but never catches up is given up after its bound; the next join goes on; the node gets a new learner once it is up and its backoff passed", async () => {
    const { logger } = captureLogger("test");
    const store = new CuratorStore(cluster.etcd.namespace(ETCD_PREFIX));
    const node = async (address: string) => {
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      const status = create(NodeStatusSchema, { externalAddress: address });
      expect(await store.createNode(create(NodeRecordSchema, { id, publicKey: rawPublicKey(key.publicKey), joinKey: rawPublicKey(generateKeyPair().publicKey), state: NodeState.UP, status }))).toBe(
        "created",
      );
      return (await store.node(id))!.value;
    };
    const stalled = await node("127.0.0.97");
    const next = await node("127.0.0.96");
    const learners = async () => (await etcdMembers(cluster.etcd)).filter((m) => m.isLearner);
    // The owner gives `stalled` the consensus role (as UpdateNodeRoles does); its etcd never starts.
    const role = await grantConsensus(cluster.etcd, store, stalled, logger);
    await store.updateNode(stalled.id, (r) => ((r.roles = create(NodeRolesSchema, { consensusMember: role })), r));
    // While its learner stays, the next node's join is refused.
    await expect(grantConsensus(cluster.etcd, store, next, logger)).rejects.toThrow(/one node joins etcd at a time/);

    const joins = newConsensusJoins();
    const round = async (now: number, up = false) => holdConsensusJoins(cluster.etcd, store, (await store.nodes()).nodes, joins, { healthy: (id) => up && id === stalled.id, logger, now });
    const t0 = Date.now();
    expect(await round(t0)).toEqual([]);
    expect(await round(t0 + LEARNER_CATCH_UP_MS - 1)).toEqual([]);
    expect((await learners()).map((m) => m.peerUrls[0])).toEqual([peerUrl("127.0.0.97")]);
    expect(await round(t0 + LEARNER_CATCH_UP_MS)).toEqual([{ kind: "given-up", node: stalled.id, learnerMs: LEARNER_CATCH_UP_MS, started: false, rejoinInMs: REJOIN_BACKOFF_MS }]);
    expect(await learners()).toEqual([]);
    // The role stays: it is what the node should run.
    expect((await store.node(stalled.id))?.value.roles?.consensusMember).toBeDefined();

    // The next join goes on; while its learner catches up, `stalled` gets none, up or not.
    await grantConsensus(cluster.etcd, store, next, logger);
    const rejoinAt = t0 + LEARNER_CATCH_UP_MS + REJOIN_BACKOFF_MS;
    expect(await round(rejoinAt, true)).toEqual([]);
    for (const m of await learners()) await cluster.etcd.cluster.memberRemove({ ID: m.id });
    // Not up (no heartbeats): none, even past its backoff; up before its backoff passed: none either.
    expect(await round(rejoinAt, false)).toEqual([]);
    expect(await round(rejoinAt - 1, true)).toEqual([]);
    // Up, and past its backoff: a new learner, and a role that names today's members.
    expect(await round(rejoinAt, true)).toEqual([{ kind: "rejoining", node: stalled.id, givenUp: 1 }]);
    expect((await learners()).map((m) => m.peerUrls[0])).toEqual([peerUrl("127.0.0.97")]);
    const peers = (await store.node(stalled.id))?.value.roles?.consensusMember?.peers.map((p) => p.url).sort();
    expect(peers).toEqual((await etcdMembers(cluster.etcd)).map((m) => m.peerUrls[0]!).sort());
    // Given up again: the wait doubles.
    const t1 = rejoinAt + 1;
    expect(await round(t1)).toEqual([]);
    expect(await round(t1 + LEARNER_CATCH_UP_MS)).toEqual([{ kind: "given-up", node: stalled.id, learnerMs: LEARNER_CATCH_UP_MS, started: false, rejoinInMs: 2 * REJOIN_BACKOFF_MS }]);
    expect(await learners()).toEqual([]);
    // Leave the shared cluster as it was: no role, no record.
    for (const id of [stalled.id, next.id]) await store.updateNode(id, (r) => ((r.roles = undefined), r));
  }, 60_000);
});
