// A one-node cluster for tests: a real etcd member and a real curator on
// loopback, bootstrapped as the first node would, plus helpers to call it as
// the owner, as a node or as a stranger. Used by the curator's tests and by
// tests of packages that talk to a curator.
//
// Test-only: mod.ts does not export this file, so that product code never
// bundles it. Tests import it directly (`../curator/test_cluster.ts`), the
// one exception to "other packages import a package only through mod.ts".

import type { Etcd3 } from "etcd3";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { KeyObject, X509Certificate } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { NodeStatusSchema } from "../../proto/gen/common/common_pb.ts";
import { Value } from "../event/mod.ts";
import { captureLogger, type LogEntry } from "../log/mod.ts";
import { clientUrl, connectEtcd, createEtcdCA, issueMemberCertificate, peerUrl, runEtcdMember } from "../consensus/mod.ts";
import { generateKeyPair, nodeIdFromPublicKey, rawPublicKey, selfSignedCertificate, type CA, type KeyPair } from "../pki/mod.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { Curator, WatchEvent_Progress } from "../../proto/gen/curator/curator_pb.ts";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { X509Certificate as X509CertificateClass } from "node:crypto";
import { RpcError, createClient } from "../rpc/mod.ts";
import { dialCurator, type CuratorEndpoint } from "./client/mod.ts";
import { supervise, untilCancelled, type Supervisor } from "../supervisor/mod.ts";
import { eventually, freePorts, tempDir, testCA, testNode, treeEtcd, type TestNode } from "../testing/mod.ts";
import { writeBootstrapState } from "./bootstrap.ts";
import { consensusRole, type EtcdMember } from "./consensus_membership.ts";
import type { Leadership } from "./leadership.ts";
import { startFakeCurator, type FakeCurator } from "./fake_curator.ts";
import { curatorRunnable } from "./server.ts";
import { CuratorStore, ETCD_PREFIX } from "./store.ts";

export interface TestCluster {
  host: string;
  curatorPort: number;
  target: string;
  clusterCA: CA;
  etcdCA: CA;
  ownerKey: KeyPair;
  /** The first node: a node of clusterCA (testNode) with its join key and cluster unlock key. */
  node: TestNode & { joinKey: KeyPair; clusterUnlockKey: Uint8Array };
  etcd: Etcd3;
  /** The etcd member's client URL (mutual TLS under etcdCA). */
  etcdUrl: string;
  store: CuratorStore;
  leadership: Value<Leadership>;
  supervisor: Supervisor;
  logs: LogEntry[];
  /** The first curator, as clients dial it. */
  endpoint: CuratorEndpoint;
  /**
   * Starts another curator on the same etcd, as another consensus member
   * of the cluster's records (for leader election tests).
   */
  addCurator(port: number): Promise<{ leadership: Value<Leadership>; endpoint: CuratorEndpoint }>;
  /** Stops the curator on this port (the first one is on curatorPort). */
  stopCurator(port: number): Promise<void>;
  /** Starts a curator for the first node again (after stopCurator), with a fresh leadership value. */
  restartFirstCurator(): Value<Leadership>;
  /**
   * Kills the etcd member (SIGKILL) and waits until the supervisor has it
   * serving again, on the same data.
   */
  killEtcd(): Promise<void>;
  /** A client of a curator (the first by default), calling as `as`. */
  client<S extends Parameters<typeof createClient>[0]>(service: S, as: Credentials, endpoint?: CuratorEndpoint): ReturnType<typeof createClient<S>>;
  close(): Promise<void>;
}

export type Credentials =
  | { kind: "owner"; certificate: X509Certificate; privateKey: KeyObject }
  | { kind: "node"; certificate: X509Certificate; privateKey: KeyObject }
  | { kind: "self-signed"; key: KeyPair }
  | { kind: "none" };

/** How long a test cluster's etcd may take to serve. */
const ETCD_READY_TIMEOUT_MS = 45_000;

/** Three loopback ports for one cluster (see freePorts). */
function ports(): { peer: number; client: number; curator: number } {
  const [peer, client, curator] = freePorts(3) as [number, number, number];
  return { peer, client, curator };
}

export interface TestClusterOptions {
  /** How long without a heartbeat makes a node timed out (default: the product's). */
  heartbeatTimeoutMs?: number;
  /** false: the curators keep no audit trail (bench/audit.ts). */
  auditTrail?: boolean;
}

export async function startTestCluster(options: TestClusterOptions = {}): Promise<TestCluster> {
  const dir = tempDir("nodecore-curator-");
  const host = "127.0.0.1";
  const p = ports();
  const clusterCA = testCA();
  const etcdCAKey = generateKeyPair();
  const etcdCA: CA = { certificate: createEtcdCA(etcdCAKey), privateKey: etcdCAKey.privateKey };
  const ownerKey = generateKeyPair();
  const firstNode = testNode(clusterCA, { ipAddresses: [host] });
  const { id: nodeId, key: nodeKey } = firstNode;
  const memberCertificate = issueMemberCertificate(etcdCA, nodeKey.publicKey, { name: nodeId, addresses: [host] });
  const etcdTls = { ca: etcdCA.certificate, certificate: memberCertificate, privateKey: nodeKey.privateKey };
  const { logger, entries } = captureLogger("root");
  const leadership = new Value<Leadership>();
  let etcdReady!: () => void;
  const ready = new Promise<void>((resolve) => (etcdReady = resolve));
  const etcd = await connectEtcd({ endpoints: [clientUrl(host, p.client)], tls: etcdTls });

  const curatorOptions = (port: number, l: Value<Leadership>, key: KeyPair) => ({
    etcd,
    nodeId: nodeIdFromPublicKey(rawPublicKey(key.publicKey)),
    listenHost: host,
    port,
    privateKey: key.privateKey,
    clusterCA: clusterCA.certificate,
    leadership: l,
    ...(options.heartbeatTimeoutMs !== undefined ? { heartbeatTimeoutMs: options.heartbeatTimeoutMs } : {}),
    ...(options.auditTrail !== undefined ? { auditTrail: options.auditTrail } : {}),
  });
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("etcd", (c) =>
        runEtcdMember(c, {
          binary: treeEtcd(),
          name: nodeId,
          dataDir: join(dir.path, "etcd"),
          tlsDir: join(dir.path, "etcd-tls"),
          peerHost: host,
          clientHost: host,
          peerPort: p.peer,
          clientPort: p.client,
          tls: etcdTls,
          clusterState: "new",
          initialCluster: [{ name: nodeId, peerUrl: peerUrl(host, p.peer) }],
          onReady: etcdReady,
        }),
      );
      await untilCancelled(ctx.signal);
    },
    { logger, backoff: { initialMs: 100, multiplier: 1.5, maxMs: 2000, jitter: 0.2 } },
  );
  // Bounded, and told: an etcd that never serves fails here with its own last
  // words, not as a hook's timeout that names nothing.
  let readyTimer: ReturnType<typeof setTimeout> | undefined;
  try {
    await Promise.race([
      ready,
      new Promise<never>((_, reject) => {
        readyTimer = setTimeout(() => {
          const last = entries
            .filter((e) => e.component.includes("etcd"))
            .slice(-5)
            .map((e) => `${e.message} ${JSON.stringify(e.fields)}`);
          reject(new Error(`the test cluster's etcd (client port ${p.client}, peer port ${p.peer}) did not serve within ${ETCD_READY_TIMEOUT_MS / 1000} s; its last lines:\n${last.join("\n")}`));
        }, ETCD_READY_TIMEOUT_MS);
      }),
    ]);
  } catch (err) {
    etcd.close();
    await supervisor.stop();
    dir[Symbol.dispose]();
    throw err;
  } finally {
    clearTimeout(readyTimer);
  }
  const curators = new Map<number, Supervisor>();
  const startCurator = (port: number, l: Value<Leadership>, key: KeyPair) => {
    curators.set(port, supervise(curatorRunnable(curatorOptions(port, l, key)), { logger: logger.child(`curator-${port}`) }));
  };
  const joinKey = generateKeyPair();
  const clusterUnlockKey = new Uint8Array(randomBytes(32));
  const status = create(NodeStatusSchema, { externalAddress: host, runningCurator: { port: p.curator }, timestampMs: BigInt(Date.now()) });
  const store = new CuratorStore(etcd.namespace(ETCD_PREFIX));
  const member: EtcdMember = { id: "0", name: nodeId, peerUrls: [peerUrl(host, p.peer)], isLearner: false };
  const consensusMember = consensusRole(etcdCA, { id: nodeId, publicKey: rawPublicKey(nodeKey.publicKey), status }, [member]);
  await writeBootstrapState(etcd, {
    ownerPublicKey: rawPublicKey(ownerKey.publicKey),
    clusterCA,
    etcdCA,
    node: { id: nodeId, publicKey: rawPublicKey(nodeKey.publicKey), joinKey: rawPublicKey(joinKey.publicKey), clusterUnlockKey, status, consensusMember },
  });
  startCurator(p.curator, leadership, nodeKey);
  await eventually(() => leadership.peek()?.isLeader === true, { timeoutMs: 30_000, what: "curator leadership" });
  const target = `${host}:${p.curator}`;
  const endpoint: CuratorEndpoint = { host, port: p.curator, nodeId };

  return {
    host,
    curatorPort: p.curator,
    target,
    clusterCA,
    etcdCA,
    ownerKey,
    node: { ...firstNode, joinKey, clusterUnlockKey },
    etcd,
    etcdUrl: clientUrl(host, p.client),
    store,
    leadership,
    supervisor,
    logs: entries,
    endpoint,
    async addCurator(port) {
      const key = generateKeyPair();
      const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
      const role = consensusRole(etcdCA, { id, publicKey: rawPublicKey(key.publicKey), status }, [member]);
      const record = create(NodeRecordSchema, {
        id,
        publicKey: rawPublicKey(key.publicKey),
        joinKey: rawPublicKey(generateKeyPair().publicKey),
        state: NodeState.UP,
        status,
        roles: { consensusMember: role },
      });
      if ((await store.createNode(record)) !== "created") throw new Error("could not record the second curator's node");
      const l = new Value<Leadership>();
      startCurator(port, l, key);
      return { leadership: l, endpoint: { host, port, nodeId: id } };
    },
    async stopCurator(port) {
      await curators.get(port)?.stop();
      curators.delete(port);
    },
    restartFirstCurator() {
      const l = new Value<Leadership>();
      startCurator(p.curator, l, nodeKey);
      return l;
    },
    async killEtcd() {
      const pidFile = join(dir.path, "etcd.pid");
      const pidOf = () => (existsSync(pidFile) ? Number(readFileSync(pidFile, "utf8").split(" ")[0]) : undefined);
      const pid = pidOf();
      if (pid === undefined) throw new Error(`no etcd pid file at ${pidFile}`);
      process.kill(pid, "SIGKILL");
      await eventually(() => pidOf() !== undefined && pidOf() !== pid, { timeoutMs: 30_000, what: "etcd started again" });
      await eventually(() => etcd.get("cluster").then(() => true), { timeoutMs: 30_000, what: "etcd serving again" });
    },
    client(service, as, e = endpoint) {
      const tls =
        as.kind === "owner" || as.kind === "node"
          ? { ca: clusterCA.certificate, certificate: as.certificate, privateKey: as.privateKey }
          : as.kind === "self-signed"
            ? { ca: clusterCA.certificate, certificate: selfSignedCertificate(as.key), privateKey: as.key.privateKey }
            : { ca: clusterCA.certificate };
      return dialCurator(service, e, tls);
    },
    async close() {
      await Promise.all([...curators.values()].map((c) => c.stop()));
      etcd.close();
      await supervisor.stop();
      dir[Symbol.dispose]();
    },
  };
}

/**
 * An impostor curator: a fake curator (fake_curator.ts) that lets any
 * certificate holder call and answers with convincing lies (a register
 * ticket, the cluster's CA, an invented node, an unlock key), serving with
 * a genuine node certificate of the cluster, as an enrolled node could.
 * Every client must refuse it before it sends a single call; `calls`
 * records any that got through.
 */
export type ImpostorCurator = FakeCurator;

export function startImpostorCurator(node: { key: KeyPair; certificate: X509Certificate }, clusterCA: X509Certificate, host = "127.0.0.1"): Promise<ImpostorCurator> {
  return startFakeCurator({
    serving: node,
    clusterCA,
    host,
    admits: "any certificate",
    management: {
      getRegisterTicket: async () => ({ ticket: new Uint8Array(32) }),
      getClusterInfo: async () => ({ caCertificate: new Uint8Array(clusterCA.raw) }),
      getNodes: async function* () {
        yield { id: "node-0000000000000bad", state: NodeState.UP };
      },
    },
    curator: {
      watch: async function* () {
        yield { progress: WatchEvent_Progress.LAST_BACKLOGGED };
      },
      joinNode: async () => ({ clusterUnlockKey: new Uint8Array(32) }),
    },
  });
}

/** The RpcError a call that must be refused was refused with. */
export async function refusal(promise: Promise<unknown>): Promise<RpcError> {
  try {
    await promise;
  } catch (err) {
    if (err instanceof RpcError) return err;
    throw err;
  }
  throw new Error("call succeeded but should have been refused");
}

/** The owner of a test cluster, with its certificate from AAA.Escrow. */
export async function ownerOf(cluster: TestCluster): Promise<{ kind: "owner"; certificate: X509Certificate; privateKey: KeyObject }> {
  const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
  try {
    const escrow = await aaa.escrow({});
    return { kind: "owner", certificate: new X509CertificateClass(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
  } finally {
    aaa.close();
  }
}

/** Registers, approves and commits a new node as `owner`; returns it as a caller with its node certificate. */
export async function enrolNode(
  cluster: TestCluster,
  owner: { kind: "owner"; certificate: X509Certificate; privateKey: KeyObject },
): Promise<{ kind: "node"; certificate: X509Certificate; privateKey: KeyObject; id: string; key: KeyPair; joinKey: KeyPair }> {
  const key = generateKeyPair();
  const joinKey = generateKeyPair();
  const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
  const management = cluster.client(Management, owner);
  const handshake = cluster.client(Curator, { kind: "self-signed", key });
  try {
    const { ticket } = await management.getRegisterTicket({});
    await handshake.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(joinKey.publicKey) });
    await management.approveNode({ id });
    const committed = await handshake.commitNode({ clusterUnlockKey: new Uint8Array(32).fill(7) });
    return { kind: "node", certificate: new X509CertificateClass(committed.nodeCertificate), privateKey: key.privateKey, id, key, joinKey };
  } finally {
    handshake.close();
    management.close();
  }
}
