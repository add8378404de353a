// The curator client: endpoints, what a curator must prove, directories,
// and failover against real servers on loopback (a real curator, and an
// impostor serving with a genuine node certificate).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { X509Certificate } from "node:crypto";
import { AAA, Management } from "../../../proto/gen/api/management_pb.ts";
import { ClusterDirectorySchema, NodeRolesSchema } from "../../../proto/gen/common/common_pb.ts";
import { generateKeyPair, issueCuratorCertificate, issueNodeCertificate, issueOwnerCertificate, nodeIdFromPublicKey, rawPublicKey } from "../../pki/mod.ts";
import { refusal, startImpostorCurator, startTestCluster, type ImpostorCurator, type TestCluster } from "../test_cluster.ts";
import { createServer as createNetServer, connect as tcpConnect, type AddressInfo, type Server } from "node:net";
import type { Value } from "../../event/mod.ts";
import { RpcError, Status } from "../../rpc/mod.ts";
import { eventually, freePort, testCA, testCurator, testNode, testOwner } from "../../testing/mod.ts";
import type { Leadership } from "../leadership.ts";
import { answerFailure, connectFailure } from "./failover.ts";
import { acceptsConnections, connectPatiently } from "./patience.ts";
import {
  CuratorPool,
  LEADER_TRAILER,
  NoCuratorError,
  callAnyCurator,
  leaderHintOf,
  type CuratorEndpoint,
  curatorIdentityProblem,
  directoryOf,
  endpointsOfDirectory,
  formatEndpoint,
  parseEndpoint,
} from "./mod.ts";

const ca = testCA();

describe("endpoints", () => {
  test("parse what people type and what the config file holds, IPv4 and IPv6", () => {
    expect(parseEndpoint("10.0.0.2")).toEqual({ host: "10.0.0.2", port: 7835 });
    expect(parseEndpoint("10.0.0.2:9000")).toEqual({ host: "10.0.0.2", port: 9000 });
    expect(parseEndpoint("fd00::2")).toEqual({ host: "fd00::2", port: 7835 });
    expect(parseEndpoint("[FD00:0::2]:9000")).toEqual({ host: "fd00::2", port: 9000 });
    expect(parseEndpoint("node-0123456789abcdef@10.0.0.2:7835")).toEqual({ host: "10.0.0.2", port: 7835, nodeId: "node-0123456789abcdef" });
    expect(parseEndpoint("localhost")).toEqual({ host: "localhost", port: 7835 });
  });

  test("format brackets IPv6 and names the node when known, and parses back", () => {
    for (const e of [
      { host: "10.0.0.2", port: 7835 },
      { host: "fd00::2", port: 7835, nodeId: "node-0123456789abcdef" },
    ]) {
      expect(parseEndpoint(formatEndpoint(e))).toEqual(e);
    }
    expect(formatEndpoint({ host: "fd00::2", port: 7835 })).toBe("[fd00::2]:7835");
  });

  test("bad endpoints are errors that quote them", () => {
    expect(() => parseEndpoint("10.0.0.2:99999")).toThrow("'10.0.0.2:99999': port must be 1-65535");
    expect(() => parseEndpoint("evil@10.0.0.2")).toThrow("'evil' is not a node ID");
    expect(() => parseEndpoint("")).toThrow("is not an endpoint");
  });

  test("a directory becomes endpoints that name the node each must be", () => {
    const node = testNode(ca);
    const directory = create(ClusterDirectorySchema, { nodes: [{ publicKey: rawPublicKey(node.key.publicKey), addresses: [{ host: "fd00:0:0::5" }] }] });
    expect(endpointsOfDirectory(directory)).toEqual([{ host: "fd00::5", port: 7835, nodeId: node.id }]);
  });
});

describe("curator identity", () => {
  const key = generateKeyPair();
  const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
  const curator = issueCuratorCertificate(ca, key.publicKey, { address: "10.0.0.2", validForMs: 3600_000 });

  test("a curator certificate for the dialled address and the expected node is accepted", () => {
    expect(curatorIdentityProblem(curator, { host: "10.0.0.2", port: 7835, nodeId: id })).toBeUndefined();
    expect(curatorIdentityProblem(curator, { host: "10.0.0.2", port: 7835 })).toBeUndefined();
  });

  test("a genuine node certificate is not a curator certificate", () => {
    const node = issueNodeCertificate(ca, key.publicKey, { ipAddresses: ["10.0.0.2"] });
    expect(curatorIdentityProblem(node, { host: "10.0.0.2", port: 7835 })).toBe(`the server at 10.0.0.2 presented a certificate of '${id}' (nodecore node), not a curator certificate`);
    const owner = issueOwnerCertificate(ca, key.publicKey);
    expect(curatorIdentityProblem(owner, { host: "10.0.0.2", port: 7835 })).toContain("not a curator certificate");
  });

  test("another node's curator certificate, or one for another address, is refused", () => {
    expect(curatorIdentityProblem(curator, { host: "10.0.0.2", port: 7835, nodeId: "node-0123456789abcdef" })).toBe(`expected curator node-0123456789abcdef at 10.0.0.2, but ${id} answered`);
    expect(curatorIdentityProblem(curator, { host: "10.0.0.3", port: 7835 })).toBe(`curator ${id} is certified for 10.0.0.2, not for 10.0.0.3`);
  });

  test("IPv6 addresses compare in canonical form", () => {
    const v6 = issueCuratorCertificate(ca, key.publicKey, { address: "fd00::2", validForMs: 3600_000 });
    expect(curatorIdentityProblem(v6, { host: "fd00:0:0:0:0:0:0:2", port: 7835 })).toBeUndefined();
  });
});

describe("directory", () => {
  const nodeA = { id: "node-aaaaaaaaaaaaaaaa", publicKey: new Uint8Array(32).fill(1) };
  test("lists consensus members at their recorded address, and nobody else", () => {
    const directory = directoryOf([
      { ...nodeA, roles: create(NodeRolesSchema, { consensusMember: { address: "10.0.0.1" } }) },
      { id: "node-bbbbbbbbbbbbbbbb", publicKey: new Uint8Array(32).fill(2), roles: create(NodeRolesSchema, { kubernetesWorker: {} }) },
      { id: "node-cccccccccccccccc", publicKey: new Uint8Array(32).fill(3) },
    ]);
    expect(directory.nodes.map((n) => n.addresses.map((a) => a.host))).toEqual([["10.0.0.1"]]);
  });

  test("a role granted before addresses were recorded falls back to the member's own peer URL", () => {
    const roles = create(NodeRolesSchema, {
      consensusMember: {
        peers: [
          { name: nodeA.id, url: "https://[fd00::1]:7834" },
          { name: "x", url: "https://10.9.9.9:7834" },
        ],
      },
    });
    expect(directoryOf([{ ...nodeA, roles }]).nodes[0]!.addresses[0]!.host).toBe("fd00::1");
  });
});

describe("failover against real servers", () => {
  let cluster: TestCluster;
  let impostor: ImpostorCurator;
  let owner: { ca: X509Certificate; certificate: X509Certificate; privateKey: ReturnType<typeof generateKeyPair>["privateKey"] };

  beforeAll(async () => {
    cluster = await startTestCluster();
    // The impostor holds a genuine node certificate of this very cluster.
    impostor = await startImpostorCurator(testNode(cluster.clusterCA, { ipAddresses: ["127.0.0.1"] }), cluster.clusterCA.certificate);
    const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
    const escrow = await aaa.escrow({});
    aaa.close();
    owner = { ca: cluster.clusterCA.certificate, certificate: new X509Certificate(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
  }, 120_000);
  afterAll(async () => {
    impostor?.close();
    await cluster?.close();
  });

  test("an impostor with a genuine node certificate gets no call; the real curator after it answers", async () => {
    const ids = await callAnyCurator(Management, [impostor.endpoint, cluster.endpoint], owner, async (m) => {
      const all = [];
      for await (const n of m.getNodes({})) all.push(n.id);
      return all;
    });
    expect(ids).toEqual([cluster.node.id]);
    expect(impostor.calls).toEqual([]);
  });

  test("with only the impostor, the error says no curator could be trusted, and why", async () => {
    const err = await callAnyCurator(Management, [impostor.endpoint], owner, (m) => m.approveNode({ id: cluster.node.id })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoCuratorError);
    expect((err as Error).message).toStartWith("no curator could be trusted (1 tried): ");
    expect((err as Error).message).toContain("not a curator certificate");
    expect((err as NoCuratorError).failures.map((f) => f.kind)).toEqual(["identity"]);
    expect(impostor.calls).toEqual([]);
  });

  test("a refused connection is named as refused, at the address dialled", async () => {
    const server = createNetServer();
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const { port } = server.address() as AddressInfo;
    await new Promise<void>((resolve) => server.close(() => resolve()));
    const err = await callAnyCurator(Management, [{ host: "127.0.0.1", port }], owner, (m) => m.getClusterInfo({})).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(NoCuratorError);
    expect((err as NoCuratorError).failures.map((f) => [f.kind, f.reason])).toEqual([["refused", `connection refused at 127.0.0.1:${port}`]]);
    expect((err as Error).message).toBe(`no curator answered (1 tried): 127.0.0.1:${port}: connection refused at 127.0.0.1:${port}`);
  });

  test("a curator under another CA (a cluster launched again) is untrusted, says so, and gets no call", async () => {
    const other = testCA();
    const relaunched = await startImpostorCurator(testCurator(other), other.certificate);
    try {
      const err = await callAnyCurator(Management, [relaunched.endpoint], owner, (m) => m.getClusterInfo({})).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NoCuratorError);
      const [failure] = (err as NoCuratorError).failures;
      expect(failure!.kind).toBe("untrusted");
      expect(failure!.reason).toStartWith("its certificate is not signed by the cluster CA (");
      expect((err as Error).message).toStartWith("no curator could be trusted (1 tried): ");
      expect(relaunched.calls).toEqual([]);
    } finally {
      relaunched.close();
    }
  });

  test("a genuine curator certificate for another address is refused at this one", async () => {
    const moved = await startImpostorCurator(testCurator(cluster.clusterCA, { address: "127.0.0.9" }), cluster.clusterCA.certificate);
    try {
      const err = await callAnyCurator(Management, [moved.endpoint], owner, (m) => m.getClusterInfo({})).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NoCuratorError);
      expect((err as Error).message).toContain(`is certified for 127.0.0.9, not for 127.0.0.1`);
      expect(moved.calls).toEqual([]);
    } finally {
      moved.close();
    }
  });
});

describe("the pool: leader first, hints followed, dead curators passed over", () => {
  let cluster: TestCluster;
  let owner: { ca: X509Certificate; certificate: X509Certificate; privateKey: ReturnType<typeof generateKeyPair>["privateKey"] };
  let follower: CuratorEndpoint;
  let followerLeadership: Value<Leadership>;
  const blackholes: Server[] = [];

  beforeAll(async () => {
    cluster = await startTestCluster();
    const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
    const escrow = await aaa.escrow({});
    aaa.close();
    owner = { ca: cluster.clusterCA.certificate, certificate: new X509Certificate(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
    await cluster.leadership.waitFor((l) => l.isLeader);
    const second = await cluster.addCurator(await freePort());
    follower = second.endpoint;
    followerLeadership = second.leadership;
    await followerLeadership.waitFor((l) => l.leader?.nodeId === cluster.node.id);
    // Knowing the leader does not mean serving: the follower's server may
    // still be starting (or unable to listen). Wait until it answers, and
    // say what its curator logged if it never does.
    try {
      await eventually(() => callAnyCurator(Management, [follower], owner, (m) => m.getClusterInfo({})), { timeoutMs: 30_000, intervalMs: 100, what: "the follower curator answering" });
    } catch (err) {
      const logged = cluster.logs
        .filter((e) => e.level !== "debug")
        .slice(-15)
        .map((e) => `${e.component} ${e.message} ${JSON.stringify(e.fields ?? {})}`);
      throw new Error(`${(err as Error).message}\n${logged.join("\n")}`);
    }
  }, 120_000);
  afterAll(async () => {
    for (const b of blackholes) b.close();
    await cluster?.close();
  });

  /** A TCP server that accepts connections and never says a word: a TLS handshake there never ends. */
  async function blackhole(): Promise<CuratorEndpoint> {
    const server = createNetServer(() => {});
    blackholes.push(server);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    return { host: "127.0.0.1", port: (server.address() as AddressInfo).port };
  }

  test("a follower's refusal names the leader in a trailer, and the pool goes there and remembers it", async () => {
    const pool = new CuratorPool(owner);
    try {
      const tried: string[] = [];
      // Only the follower is known: the leader is learnt from its answer.
      await pool.call(Management, [follower], (m) => m.approveNode({ id: cluster.node.id }), { progress: (l) => tried.push(l) });
      expect(tried).toEqual([`calling ${formatEndpoint(follower)} ...`, `calling ${formatEndpoint(cluster.endpoint)} ...`]);
      expect(pool.leader).toEqual(cluster.endpoint);
      // From now on the leader is called first, whatever order the caller gives.
      tried.length = 0;
      await pool.call(Management, [follower, cluster.endpoint], (m) => m.approveNode({ id: cluster.node.id }), { progress: (l) => tried.push(l) });
      expect(tried).toEqual([`calling ${formatEndpoint(cluster.endpoint)} ...`]);
    } finally {
      pool.close();
    }
  });

  test("the hint is a trailer of UNAVAILABLE, parsed into an endpoint with the leader's node", async () => {
    const client = cluster.client(Management, { kind: "owner", ...owner }, follower);
    try {
      const err = await refusal(client.approveNode({ id: cluster.node.id }));
      expect(err.code).toBe(Status.UNAVAILABLE);
      expect(err.trailers[LEADER_TRAILER]).toBe(formatEndpoint(cluster.endpoint));
      expect(leaderHintOf(err)).toEqual(cluster.endpoint);
    } finally {
      client.close();
    }
  });

  test("a curator that never answers the handshake costs the connect patience, and only when nobody else answers", async () => {
    const silent = await blackhole();
    // Dialled at once, the live curator answers first even though it is
    // listed last. (On the default deadlines: this process's own curator,
    // loaded, may take longer than 300 ms, which would add a line.)
    const patient = new CuratorPool(owner);
    try {
      const tried: string[] = [];
      const info = await patient.call(Management, [silent, cluster.endpoint], (m) => m.getClusterInfo({}), { progress: (l) => tried.push(l) });
      expect(info.caCertificate.length).toBeGreaterThan(0);
      expect(tried).toEqual([`calling ${formatEndpoint(cluster.endpoint)} ...`]);
    } finally {
      patient.close();
    }
    const pool = new CuratorPool(owner, { connectTimeoutMs: 300, connectPatienceMs: 900 });
    try {
      const err = await pool.call(Management, [silent], (m) => m.getClusterInfo({})).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NoCuratorError);
      expect((err as NoCuratorError).failures.map((f) => [f.kind, f.reason])).toEqual([
        ["timeout", "timed out: its host accepts connections, but no TLS handshake finished within 0.9 s (the node is busy, or no curator serves that port)"],
      ]);
    } finally {
      pool.close();
    }
  });

  test("a curator slower to handshake than the connect deadline is waited for, because its host accepts connections", async () => {
    // A relay that holds each connection for 800 ms before it reaches the
    // curator: a node too busy to answer within the 300 ms deadline.
    const relay = createNetServer((inbound) => {
      inbound.pause();
      setTimeout(() => {
        const outbound = tcpConnect({ host: cluster.endpoint.host, port: cluster.endpoint.port }, () => {
          inbound.pipe(outbound).pipe(inbound);
          inbound.resume();
        });
        outbound.on("error", () => inbound.destroy());
        inbound.on("error", () => outbound.destroy());
      }, 800);
    });
    blackholes.push(relay);
    await new Promise<void>((resolve) => relay.listen(0, "127.0.0.1", resolve));
    const slow: CuratorEndpoint = { ...cluster.endpoint, host: "127.0.0.1", port: (relay.address() as AddressInfo).port };
    const pool = new CuratorPool(owner, { connectTimeoutMs: 300, connectPatienceMs: 10_000 });
    try {
      const said: string[] = [];
      const info = await pool.call(Management, [slow], (m) => m.getClusterInfo({}), { progress: (l) => said.push(l) });
      expect(info.caCertificate.length).toBeGreaterThan(0);
      expect(said[0]).toBe(`${formatEndpoint(slow)} accepts connections but is slow to finish the TLS handshake; waiting for it ...`);
    } finally {
      pool.close();
    }
  });

  test("a host that takes no TCP connection is given up on at the connect deadline, with no patience", async () => {
    const closed = await freePort();
    const started = Date.now();
    const neverConnects = (ms: number) => new Promise<"timeout">((resolve) => setTimeout(() => resolve("timeout"), ms));
    const outcome = await connectPatiently(neverConnects, { host: "127.0.0.1", port: closed }, 300, 5_000);
    expect(outcome).toEqual({ result: "timeout", timeoutMs: 300, accepted: false });
    expect(Date.now() - started).toBeLessThan(2_000);
    expect(await acceptsConnections({ host: "127.0.0.1", port: closed }, 1_000)).toBe(false);
    expect(await acceptsConnections(cluster.endpoint, 1_000)).toBe(true);
  });

  test("IPv6: a curator on [::1] is dialled and verified by its IPv6 address", async () => {
    const v6 = await startImpostorCurator(testCurator(cluster.clusterCA, { address: "::1" }), cluster.clusterCA.certificate, "::1");
    try {
      expect(formatEndpoint(v6.endpoint)).toMatch(/^node-[0-9a-f]{16}@\[::1\]:\d+$/);
      await callAnyCurator(Management, [parseEndpoint(formatEndpoint(v6.endpoint))], owner, (m) => m.getClusterInfo({}));
      expect(v6.calls).toEqual(["Management/GetClusterInfo"]);
    } finally {
      v6.close();
    }
  });

  test("a dead leader is dropped from the front at once, and the new leader is found", async () => {
    const pool = new CuratorPool(owner);
    try {
      await pool.call(Management, [cluster.endpoint, follower], (m) => m.approveNode({ id: cluster.node.id }));
      expect(pool.leader).toEqual(cluster.endpoint);
      await cluster.stopCurator(cluster.curatorPort);
      await followerLeadership.waitFor((l) => l.isLeader);
      const tried: string[] = [];
      await pool.call(Management, [cluster.endpoint, follower], (m) => m.approveNode({ id: cluster.node.id }), { progress: (l) => tried.push(l) });
      expect(pool.leader).toEqual(follower);
      // The old leader is not in front any more: the next call goes straight to the new one.
      tried.length = 0;
      await pool.call(Management, [cluster.endpoint, follower], (m) => m.approveNode({ id: cluster.node.id }), { progress: (l) => tried.push(l) });
      expect(tried).toEqual([`calling ${formatEndpoint(follower)} ...`]);
    } finally {
      pool.close();
    }
  });
});

describe("failure descriptions", () => {
  const endpoint = { host: "fd00::2", port: 7835 };

  test("each connection failure names its cause and the address dialled", () => {
    const failure = (details: string) => new RpcError(Status.UNAVAILABLE, details, "Management/GetNodes").connectionFailure;
    const described = (details: string) => connectFailure(endpoint, { result: "failed", failure: failure(details) });
    expect(described("No connection established. Last error: Error: connect ECONNREFUSED fd00::2:7835. Resolution note: ")).toEqual({
      endpoint,
      kind: "refused",
      reason: "connection refused at [fd00::2]:7835",
    });
    expect(described("No connection established. Last error: Error: connect EHOSTUNREACH fd00::2:7835 - Local (:::0). Resolution note: ").reason).toBe("no route to [fd00::2]:7835 (host unreachable)");
    expect(described("No connection established. Last error: connect ENETUNREACH fd00::2:7835. Resolution note: ").reason).toBe("no route to [fd00::2]:7835 (network unreachable)");
    expect(described("No connection established. Last error: Error: read ECONNRESET. Resolution note: ")).toMatchObject({ kind: "failed", reason: "connection failed: read ECONNRESET" });
    expect(connectFailure(endpoint, { result: "failed" })).toMatchObject({ kind: "failed", reason: "connection failed (no reason given)" });
    expect(connectFailure(endpoint, { result: "failed", identityProblem: "expected curator a, but b answered" })).toMatchObject({ kind: "identity" });
    expect(connectFailure(endpoint, { result: "timeout", timeoutMs: 3000 })).toMatchObject({ kind: "timeout", reason: "timed out: no connection within 3 s" });
  });

  test("a call's deadline says deadline, in seconds", () => {
    const late = new RpcError(Status.DEADLINE_EXCEEDED, "Deadline exceeded after 0.502s,LB pick: 0.000s,remote_addr=127.0.0.1:1", "Management/GetNodes");
    expect(answerFailure(endpoint, late)).toMatchObject({ kind: "deadline", reason: "deadline exceeded: no answer within 0.5 s" });
    const server = new RpcError(Status.DEADLINE_EXCEEDED, "etcd did not answer", "Management/GetNodes");
    expect(answerFailure(endpoint, server, 1234).reason).toBe("deadline exceeded: etcd did not answer");
    // The server's own deadline timer fired first (a loaded client): the caller's measure says how long.
    const serverTimer = new RpcError(Status.DEADLINE_EXCEEDED, "Deadline exceeded", "Management/GetNodes");
    expect(answerFailure(endpoint, serverTimer, 312).reason).toBe("deadline exceeded: no answer within 0.3 s");
    expect(answerFailure(endpoint, new RpcError(Status.UNAVAILABLE, "not the leader", "Management/ApproveNode"))).toMatchObject({ kind: "unavailable", reason: "not the leader" });
  });

  test("a connection that went away under a call is a drop, not a refusal: the call may have been carried out", () => {
    const dropped = new RpcError(Status.UNAVAILABLE, "Connection dropped", "Management/UpdateNodeRoles");
    expect(answerFailure(endpoint, dropped)).toMatchObject({ kind: "dropped", reason: "the connection dropped during the call (Connection dropped)" });
  });
});

describe("an election under way", () => {
  // Right after a bootstrap, and in every failover, a curator answers but
  // none leads: "no leader is elected yet". ctl node approve failed on it
  // (a process cluster's formation under load); the call was refused before
  // anything was done, so the pool asks again until a leader answers.
  const electionCA = testCA();
  const owner = testOwner(electionCA);
  async function leaderlessFor(refusals: number) {
    const { startFakeCurator } = await import("../fake_curator.ts");
    const { UnavailableError } = await import("../../rpc/mod.ts");
    const { electionTrailer } = await import("./mod.ts");
    let asked = 0;
    const curator = await startFakeCurator({
      serving: testCurator(electionCA),
      clusterCA: electionCA.certificate,
      management: {
        getRegisterTicket: async () => {
          if (++asked <= refusals) throw new UnavailableError("this curator is not the leader, and no leader is elected yet", { trailers: electionTrailer() });
          return { ticket: new Uint8Array([7]) };
        },
      },
    });
    return { curator, asked: () => asked };
  }

  test("a call is asked again while no curator leads, and answered once one does; the progress says why it waits", async () => {
    const { curator, asked } = await leaderlessFor(3);
    const pool = new CuratorPool(owner.tls);
    const said: string[] = [];
    try {
      const answer = await pool.call(Management, [curator.endpoint], (m) => m.getRegisterTicket({}), { progress: (l) => said.push(l) });
      expect(answer.ticket).toEqual(new Uint8Array([7]));
      expect(asked()).toBe(4);
      expect(said.filter((l) => l.startsWith("no curator leads yet")).length).toBe(1);
    } finally {
      pool.close();
      curator.close();
    }
  }, 30_000);

  test("past its patience the call fails as before, naming the curator's answer", async () => {
    const { curator, asked } = await leaderlessFor(1_000);
    const pool = new CuratorPool(owner.tls);
    try {
      const err = await pool.call(Management, [curator.endpoint], (m) => m.getRegisterTicket({}), { electionPatienceMs: 1_200 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(NoCuratorError);
      expect((err as Error).message).toContain("no leader is elected yet");
      expect(asked()).toBeGreaterThanOrEqual(2);
    } finally {
      pool.close();
      curator.close();
    }
  }, 30_000);
});
