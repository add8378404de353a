// The listener's bounds against raw TCP clients that never speak TLS, and
// certificate rotation, on loopback.

import { afterEach, describe, expect, test } from "bun:test";
import type { Server } from "@grpc/grpc-js";
import { connect, type Socket } from "node:net";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { commonNameOf, createClusterCA, generateKeyPair, issueNodeCertificate, issueOwnerCertificate, type CA } from "../pki/mod.ts";
import { eventually } from "../testing/mod.ts";
import { addService, channelCredentials, channelOptions, createClient, createServer, listen, MAX_PENDING_HANDSHAKES_PER_SOURCE, serverCredentials } from "./mod.ts";

const caKey = generateKeyPair();
const ca: CA = { certificate: createClusterCA(caKey), privateKey: caKey.privateKey };
const ownerKey = generateKeyPair();
const ownerCert = issueOwnerCertificate(ca, ownerKey.publicKey);

const servers: Server[] = [];
const sockets: Socket[] = [];
afterEach(() => {
  for (const s of sockets.splice(0)) s.destroy();
  for (const s of servers.splice(0)) s.forceShutdown();
});

function managementServer() {
  const server = createServer();
  servers.push(server);
  const unused = async () => {
    throw new Error("not used here");
  };
  addService(
    server,
    Management,
    {
      getRegisterTicket: async () => ({ ticket: new Uint8Array([7]) }),
      getClusterInfo: unused,
      getNodes: async function* () {},
      approveNode: unused,
      updateNodeRoles: unused,
      getEtcdCredentials: unused,
      deleteNode: unused,
      undeleteNode: unused,
      updateNodeLabels: unused,
      getKubernetesCredentials: unused,
      backup: async function* () {},
      setBackupSchedule: async () => ({}),
    },
    {
      ca: () => ca.certificate,
      policy: { getRegisterTicket: "owner", getClusterInfo: "owner", getNodes: "owner", approveNode: "owner", updateNodeRoles: "owner", getEtcdCredentials: "owner", deleteNode: "owner", undeleteNode: "owner", updateNodeLabels: "owner", getKubernetesCredentials: "owner", backup: "owner", setBackupSchedule: "owner" },
    },
  );
  return server;
}

/** Opens `count` TCP connections that never send a byte, from `from`; counts how many the server closed. */
function idleConnections(port: number, count: number, from = "127.0.0.1"): { closed: () => number } {
  let closed = 0;
  for (let i = 0; i < count; i++) {
    const socket = connect({ port, host: "127.0.0.1", localAddress: from });
    socket.on("error", () => {});
    socket.on("close", () => closed++);
    sockets.push(socket);
  }
  return { closed: () => closed };
}

function ownerClient(port: number, expect: (name: string | undefined) => string | undefined = () => undefined) {
  return createClient(Management, `127.0.0.1:${port}`, {
    credentials: channelCredentials({ server: { ca: ca.certificate, verify: (c) => expect(commonNameOf(c)) }, certificate: ownerCert, privateKey: ownerKey.privateKey }),
    channelOptions: channelOptions(),
  });
}

describe("listener", () => {
  test("connections that never finish the TLS handshake are closed at the handshake deadline", async () => {
    const key = generateKeyPair();
    const server = managementServer();
    const credentials = serverCredentials({ certificate: issueNodeCertificate(ca, key.publicKey), privateKey: key.privateKey, handshakeTimeoutMs: 500 });
    const { port, counters } = await listen(server, "127.0.0.1:0", credentials, { maxConnections: 1000, maxPendingHandshakes: 100, maxPendingHandshakesPerSource: 100 });
    const idle = idleConnections(port, 50);
    await eventually(() => expect(counters.open).toBe(50));
    expect(counters.handshaking).toBe(50);
    await eventually(() => expect(idle.closed()).toBe(50), { timeoutMs: 10_000 });
    await eventually(() => expect(counters.open).toBe(0));
    // The server still serves, and a served connection is no longer counted as handshaking.
    const client = ownerClient(port);
    expect((await client.getRegisterTicket({})).ticket).toEqual(new Uint8Array([7]));
    expect(counters.handshaking).toBe(0);
    expect(counters.open).toBe(1);
    client.close();
  });

  test("connections beyond the bound of pending handshakes are dropped at once", async () => {
    const key = generateKeyPair();
    const server = managementServer();
    const credentials = serverCredentials({ certificate: issueNodeCertificate(ca, key.publicKey), privateKey: key.privateKey, handshakeTimeoutMs: 60_000 });
    const { port, counters } = await listen(server, "127.0.0.1:0", credentials, { maxConnections: 1000, maxPendingHandshakes: 10, maxPendingHandshakesPerSource: 100, reservedForKnownSources: 0 });
    const idle = idleConnections(port, 40);
    await eventually(() => expect(idle.closed()).toBe(30));
    expect(counters.handshaking).toBe(10);
    expect(counters.refused).toBe(30);
    // Once they go, the server takes connections again.
    for (const s of sockets.splice(0)) s.destroy();
    await eventually(() => expect(counters.handshaking).toBe(0));
    const client = ownerClient(port);
    expect((await client.getRegisterTicket({})).ticket).toEqual(new Uint8Array([7]));
    client.close();
  });

  test("one address flooding a port with idle connections holds only its own share of handshakes, and the owner from another address is served meanwhile", async () => {
    const key = generateKeyPair();
    const server = managementServer();
    const credentials = serverCredentials({ certificate: issueNodeCertificate(ca, key.publicKey), privateKey: key.privateKey, handshakeTimeoutMs: 60_000 });
    const { port, counters } = await listen(server, "127.0.0.1:0", credentials);
    const flood = idleConnections(port, 1000, "127.0.0.2");
    await eventually(() => expect(flood.closed()).toBe(1000 - MAX_PENDING_HANDSHAKES_PER_SOURCE), { timeoutMs: 20_000 });
    expect(counters.handshaking).toBe(MAX_PENDING_HANDSHAKES_PER_SOURCE);
    // The flood goes on: what it holds stays open while the owner calls from 127.0.0.1.
    idleConnections(port, 200, "127.0.0.2");
    const client = ownerClient(port);
    for (let i = 0; i < 5; i++) expect((await client.getRegisterTicket({}, { timeoutMs: 5_000 })).ticket).toEqual(new Uint8Array([7]));
    client.close();
    expect(counters.handshaking).toBe(MAX_PENDING_HANDSHAKES_PER_SOURCE);
  }, 60_000);

  test("when many addresses flood a port, a source that finished a handshake before still gets in, and a new one waits its turn", async () => {
    const key = generateKeyPair();
    const server = managementServer();
    const credentials = serverCredentials({ certificate: issueNodeCertificate(ca, key.publicKey), privateKey: key.privateKey, handshakeTimeoutMs: 60_000 });
    const { port, counters } = await listen(server, "127.0.0.1:0", credentials, { maxConnections: 1000, maxPendingHandshakes: 40, maxPendingHandshakesPerSource: 8, reservedForKnownSources: 10 });
    // The owner has been here before (127.0.0.1).
    const before = ownerClient(port);
    await before.getRegisterTicket({});
    before.close();
    // Six other addresses, eight each: 48 wanted, 30 (40 less the 10 reserved) let in.
    const floods = [2, 3, 4, 5, 6, 7].map((n) => idleConnections(port, 8, `127.0.0.${n}`));
    await eventually(() => expect(floods.reduce((sum, f) => sum + f.closed(), 0)).toBe(18));
    expect(counters.handshaking).toBe(30);
    // A new address finds no room for strangers ...
    const stranger = idleConnections(port, 1, "127.0.0.99");
    await eventually(() => expect(stranger.closed()).toBe(1));
    // ... while the owner, known, is served from the reserve.
    const client = ownerClient(port);
    expect((await client.getRegisterTicket({}, { timeoutMs: 5_000 })).ticket).toEqual(new Uint8Array([7]));
    client.close();
  }, 60_000);

  test("a rotated certificate is served to new connections without a restart", async () => {
    const first = generateKeyPair();
    const second = generateKeyPair();
    const firstCert = issueNodeCertificate(ca, first.publicKey);
    const secondCert = issueNodeCertificate(ca, second.publicKey);
    const server = managementServer();
    const credentials = serverCredentials({ certificate: firstCert, privateKey: first.privateKey });
    const { port } = await listen(server, "127.0.0.1:0", credentials);
    const seen: (string | undefined)[] = [];
    const before = ownerClient(port, (name) => (seen.push(name), undefined));
    await before.getRegisterTicket({});
    before.close();
    credentials.rotate({ certificate: secondCert, privateKey: second.privateKey });
    const after = ownerClient(port, (name) => (seen.push(name), undefined));
    await after.getRegisterTicket({});
    after.close();
    expect(seen).toEqual([commonNameOf(firstCert), commonNameOf(secondCert)]);
  });
});
