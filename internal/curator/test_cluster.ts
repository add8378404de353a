// A one-node cluster for tests: a real etcd member and a real curator on
// loopback, bootstrapped as the first node would, plus helpers to call it as
// the owner, as a node or as a stranger. Used by the curator's tests and by
// tests of packages that talk to a curator.

import type { Etcd3 } from "etcd3";
import { join } from "node:path";
import type { KeyObject, X509Certificate } from "node:crypto";
import { create } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { NodeStatusSchema } from "../../proto/gen/common/common_pb.ts";
import { Value } from "../event/mod.ts";
import { captureLogger, type LogEntry } from "../log/mod.ts";
import { clientUrl, connectEtcd, createEtcdCA, issueMemberCertificate, peerUrl, runEtcdMember } from "../consensus/mod.ts";
import {
  createClusterCA,
  generateKeyPair,
  issueNodeCertificate,
  nodeIdFromPublicKey,
  rawPublicKey,
  selfSignedCertificate,
  type CA,
  type KeyPair,
} from "../pki/mod.ts";
import { CLUSTER_SERVER_NAME, channelCredentials, channelOptions, createClient } from "../rpc/mod.ts";
import { supervise, untilCancelled, type Supervisor } from "../supervisor/mod.ts";
import { eventually, tempDir } from "../testing/mod.ts";
import { writeBootstrapState } from "./bootstrap.ts";
import { consensusRole, type EtcdMember } from "./consensus_membership.ts";
import type { Leadership } from "./leadership.ts";
import { curatorRunnable } from "./server.ts";
import { CuratorStore, ETCD_PREFIX } from "./store.ts";

export interface TestCluster {
  host: string;
  curatorPort: number;
  target: string;
  clusterCA: CA;
  etcdCA: CA;
  ownerKey: KeyPair;
  node: { id: string; key: KeyPair; certificate: X509Certificate; joinKey: KeyPair; clusterUnlockKey: Uint8Array };
  etcd: Etcd3;
  store: CuratorStore;
  leadership: Value<Leadership>;
  supervisor: Supervisor;
  logs: LogEntry[];
  /** Starts another curator on the same etcd (for leader election tests). */
  addCurator(port: number): Value<Leadership>;
  /** Stops the curator on this port (the first one is on curatorPort). */
  stopCurator(port: number): Promise<void>;
  /** Credentials of a freshly made identity, for handshake calls. */
  client<S extends Parameters<typeof createClient>[0]>(service: S, as: Credentials, target?: string): ReturnType<typeof createClient<S>>;
  close(): Promise<void>;
}

export type Credentials =
  | { kind: "owner"; certificate: X509Certificate; privateKey: KeyObject }
  | { kind: "node"; certificate: X509Certificate; privateKey: KeyObject }
  | { kind: "self-signed"; key: KeyPair }
  | { kind: "none" };

let portCounter = 0;
/** Loopback ports unique per test process and per cluster. */
function ports(): { peer: number; client: number; curator: number } {
  const base = 21_000 + ((process.pid * 7 + portCounter++ * 10) % 20_000);
  return { peer: base, client: base + 1, curator: base + 2 };
}

export async function startTestCluster(): Promise<TestCluster> {
  const dir = tempDir("nodecore-curator-");
  const host = "127.0.0.1";
  const p = ports();
  const caKey = generateKeyPair();
  const clusterCA: CA = { certificate: createClusterCA(caKey), privateKey: caKey.privateKey };
  const etcdCAKey = generateKeyPair();
  const etcdCA: CA = { certificate: createEtcdCA(etcdCAKey), privateKey: etcdCAKey.privateKey };
  const ownerKey = generateKeyPair();
  const nodeKey = generateKeyPair();
  const nodeId = nodeIdFromPublicKey(rawPublicKey(nodeKey.publicKey));
  const nodeCertificate = issueNodeCertificate(clusterCA, nodeKey.publicKey, { serverName: CLUSTER_SERVER_NAME, ipAddresses: [host] });
  const memberCertificate = issueMemberCertificate(etcdCA, nodeKey.publicKey, { name: nodeId, addresses: [host] });
  const etcdTls = { ca: etcdCA.certificate, certificate: memberCertificate, privateKey: nodeKey.privateKey };
  const { logger, entries } = captureLogger("root");
  const leadership = new Value<Leadership>();
  let etcdReady!: () => void;
  const ready = new Promise<void>((resolve) => (etcdReady = resolve));
  const etcd = connectEtcd({ endpoints: [clientUrl(host, p.client)], tls: etcdTls });

  const curatorOptions = (port: number, l: Value<Leadership>) => ({
    etcd,
    nodeId,
    listenHost: host,
    advertiseAddress: host,
    port,
    certificate: nodeCertificate,
    privateKey: nodeKey.privateKey,
    clusterCA: clusterCA.certificate,
    leadership: l,
  });
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("etcd", (c) =>
        runEtcdMember(c, {
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
  await ready;
  const curators = new Map<number, Supervisor>();
  const startCurator = (port: number, l: Value<Leadership>) => {
    curators.set(port, supervise(curatorRunnable(curatorOptions(port, l)), { logger: logger.child(`curator-${port}`) }));
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
  startCurator(p.curator, leadership);
  await eventually(() => leadership.peek()?.isLeader === true, { timeoutMs: 30_000, what: "curator leadership" });
  const target = `${host}:${p.curator}`;

  return {
    host,
    curatorPort: p.curator,
    target,
    clusterCA,
    etcdCA,
    ownerKey,
    node: { id: nodeId, key: nodeKey, certificate: nodeCertificate, joinKey, clusterUnlockKey },
    etcd,
    store,
    leadership,
    supervisor,
    logs: entries,
    addCurator(port) {
      const l = new Value<Leadership>();
      startCurator(port, l);
      return l;
    },
    async stopCurator(port) {
      await curators.get(port)?.stop();
      curators.delete(port);
    },
    client(service, as, t = target) {
      const tls =
        as.kind === "owner" || as.kind === "node"
          ? { ca: clusterCA.certificate, certificate: as.certificate, privateKey: as.privateKey }
          : as.kind === "self-signed"
            ? { ca: clusterCA.certificate, certificate: selfSignedCertificate(as.key), privateKey: as.key.privateKey }
            : { ca: clusterCA.certificate };
      return createClient(service, t, { credentials: channelCredentials(tls), channelOptions: channelOptions() });
    },
    async close() {
      await Promise.all([...curators.values()].map((c) => c.stop()));
      etcd.close();
      await supervisor.stop();
      dir[Symbol.dispose]();
    },
  };
}
