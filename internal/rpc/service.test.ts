import { afterAll, beforeAll, describe, expect, spyOn, test } from "bun:test";
import { Client as GrpcClient, Metadata, Server, status } from "@grpc/grpc-js";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { Curator, WatchEvent_Progress } from "../../proto/gen/curator/curator_pb.ts";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { createCertificate, generateKeyPair, NODE_ORGANIZATION, commonNameOf, nodeIdFromPublicKey, rawPublicKey, selfSignedCertificate } from "../pki/mod.ts";
import {
  FailedPreconditionError,
  NotFoundError,
  type AuditedCall,
  RpcError,
  addService,
  channelCredentials,
  channelOptions,
  createClient,
  partialService,
  serverCredentials,
  MAX_REQUEST_BYTES,
  type ClientTlsOptions,
  type ServerIdentity,
} from "./mod.ts";
import { X509Certificate } from "node:crypto";
import { eventually, testCA, testNode, testOwner } from "../testing/mod.ts";

// A real grpc-js server and real clients over mutual TLS with Ed25519
// certificates. The services are fakes of the generated interfaces serving
// only the methods the tests call (partialService).

const ca = testCA();
/** The node serving every service here. */
const serving = testNode(ca, { ipAddresses: ["127.0.0.1"] });
/** The server this test's clients expect: the one node under `trusted`. */
const expecting = (trusted: X509Certificate, nodeId = serving.id): ServerIdentity => ({
  ca: trusted,
  verify: (certificate) => (commonNameOf(certificate) === nodeId ? undefined : `expected ${nodeId}, got ${commonNameOf(certificate)}`),
});
const owner = testOwner(ca);
const node = testNode(ca);
const foreignCA = testCA();
const foreignOwner = testOwner(foreignCA);

let server: Server;
let target: string;
const watchCancelled: string[] = [];
const heartbeatsSeen: string[] = [];
/** What the Curator service's audit hook was told. */
const streamsAudited: AuditedCall[] = [];

beforeAll(async () => {
  server = new Server();
  addService(
    server,
    Management,
    partialService(Management, {
      async getRegisterTicket() {
        return { ticket: new Uint8Array([1, 2, 3]) };
      },
      async getClusterInfo() {
        return { caCertificate: new Uint8Array(ca.certificate.raw) };
      },
      async *getNodes() {
        yield { id: "node-a", state: NodeState.UP };
        yield { id: "node-b", state: NodeState.NEW };
      },
      async approveNode(request) {
        throw new NotFoundError(`node ${request.id} not found`);
      },
      async updateNodeRoles() {
        throw new Error("disk on fire");
      },
    }),
    {
      ca: () => ca.certificate,
      policy: {
        getRegisterTicket: "owner",
        getClusterInfo: "cluster",
        getNodes: "owner",
        approveNode: "owner",
        updateNodeRoles: "owner",
        getEtcdCredentials: "owner",
        deleteNode: "owner",
        undeleteNode: "owner",
        updateNodeLabels: "owner",
        getKubernetesCredentials: "owner",
        getMetricsCredentials: "owner",
        backup: "owner",
        setBackupSchedule: "owner",
        getEvents: "owner",
        setContainerRegistry: "owner",
        setContainerRegistryCredentials: "owner",
        removeContainerRegistry: "owner",
        listContainerRegistries: "owner",
        applyManifest: "owner",
        deleteManifest: "owner",
        listManifests: "owner",
      },
    },
  );
  addService(
    server,
    AAA,
    {
      async escrow(_request, ctx) {
        if (ctx.peer.kind === "anonymous" || ctx.peer.kind === "local") throw new Error("unreachable: policy lets only certificate holders in");
        const key = ctx.peer.kind === "owner" || ctx.peer.kind === "metrics" ? rawPublicKey(ctx.peer.certificate.publicKey) : ctx.peer.publicKey;
        return { ownerCertificate: key };
      },
    },
    { ca: () => ca.certificate, policy: { escrow: "key" } },
  );
  addService(
    server,
    Curator,
    partialService(Curator, {
      async *watch(request, ctx) {
        yield { nodes: [{ id: "node-a" }] };
        if (request.kind.case === "nodeInCluster" && request.kind.value.nodeId === "node-failing") throw new FailedPreconditionError("node-failing cannot be watched");
        yield { progress: WatchEvent_Progress.LAST_BACKLOGGED };
        if (request.kind.case === "nodeInCluster") return;
        // Follow "forever" until the client goes away.
        await new Promise<void>((resolve) => ctx.signal.addEventListener("abort", () => resolve(), { once: true }));
        watchCancelled.push(ctx.method);
      },
      // Answers every update, then says how many there were once the client half-closes.
      async *heartbeat(requests, ctx) {
        let count = 0;
        for await (const _ of requests) {
          count++;
          yield {};
        }
        heartbeatsSeen.push(`${ctx.peer.kind}:${count}`);
      },
    }),
    {
      ca: () => ca.certificate,
      audit: (call) => streamsAudited.push(call),
      policy: {
        watch: "node",
        updateNodeStatus: "node",
        registerNode: "key",
        commitNode: "key",
        joinNode: "key",
        heartbeat: "node",
        prepareColdStart: "node",
        issueKubeletCertificates: "node",
        updateNodeClusterNetworking: "node",
        reportNodeManagementCall: "node",
        watchContainerRegistries: "node",
        reportBackupStatus: "node",
      },
    },
  );
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", serverCredentials({ certificate: serving.certificate, privateKey: serving.key.privateKey }), (err, p) => (err ? reject(err) : resolve(p))),
  );
  target = `127.0.0.1:${port}`;
});

afterAll(() => {
  server.forceShutdown();
});

function clientOf<S extends Parameters<typeof createClient>[0]>(service: S, tls: ClientTlsOptions) {
  return createClient(service, target, { credentials: channelCredentials(tls), channelOptions: channelOptions() });
}

const asOwner: ClientTlsOptions = { server: expecting(ca.certificate), certificate: owner.certificate, privateKey: owner.key.privateKey };
const asNode: ClientTlsOptions = { server: expecting(ca.certificate), certificate: node.certificate, privateKey: node.key.privateKey };

/**
 * A node key and a node certificate for it, valid from a minute ago until
 * about six seconds from now (certificate times are whole seconds): time
 * for a loaded machine to make the first call, or open the stream, before it expires.
 */
function shortLivedNode() {
  const key = generateKeyPair();
  const nodeId = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
  const notBefore = new Date(Math.floor(Date.now() / 1000) * 1000 - 60_000);
  const shortLived = createCertificate({ commonName: nodeId, organization: NODE_ORGANIZATION, publicKey: key.publicKey, kind: "peer", notBefore, validForMs: 66_000 }, ca);
  return { key, shortLived };
}

async function rpcError(promise: Promise<unknown>): Promise<RpcError> {
  try {
    await promise;
  } catch (err) {
    expect(err).toBeInstanceOf(RpcError);
    return err as RpcError;
  }
  throw new Error("call succeeded but should have failed");
}

describe("grpc adapter over mutual TLS", () => {
  test("the owner calls an owner method", async () => {
    const client = clientOf(Management, asOwner);
    const response = await client.getRegisterTicket({});
    expect([...response.ticket]).toEqual([1, 2, 3]);
    client.close();
  });

  test("a node certificate cannot call an owner method", async () => {
    const client = clientOf(Management, asNode);
    const err = await rpcError(client.getRegisterTicket({}));
    expect(err.code).toBe(status.PERMISSION_DENIED);
    expect(err.details).toBe("only the cluster owner may call this");
    // …but may call a method open to the whole cluster.
    const info = await client.getClusterInfo({});
    expect(Buffer.from(info.caCertificate).equals(ca.certificate.raw)).toBe(true);
    client.close();
  });

  test("an owner certificate cannot act as a node", async () => {
    const client = clientOf(Curator, asOwner);
    const err = await rpcError(client.updateNodeStatus({ nodeId: "node-a" }));
    expect(err.code).toBe(status.PERMISSION_DENIED);
    expect(err.details).toBe("only cluster nodes may call this");
    client.close();
  });

  test("a certificate from another CA is refused with the reason", async () => {
    const client = clientOf(Management, { server: expecting(ca.certificate), certificate: foreignOwner.certificate, privateKey: foreignOwner.key.privateKey });
    const err = await rpcError(client.getRegisterTicket({}));
    expect(err.code).toBe(status.UNAUTHENTICATED);
    expect(err.details).toContain("not signed by the cluster CA");
    client.close();
  });

  test("a caller without a certificate is refused", async () => {
    const client = clientOf(Management, { server: expecting(ca.certificate) });
    const err = await rpcError(client.getClusterInfo({}));
    expect(err.code).toBe(status.UNAUTHENTICATED);
    expect(err.details).toBe("no client certificate presented");
    client.close();
  });

  test("a handshake method accepts a self-signed certificate and sees its key", async () => {
    const key = generateKeyPair();
    const client = clientOf(AAA, { server: expecting(ca.certificate), certificate: selfSignedCertificate(key), privateKey: key.privateKey });
    const response = await client.escrow({});
    expect([...response.ownerCertificate]).toEqual([...rawPublicKey(key.publicKey)]);
    client.close();
  });

  test("a client that does not trust the server's CA cannot connect", async () => {
    const client = clientOf(Management, { server: expecting(foreignCA.certificate), certificate: owner.certificate, privateKey: owner.key.privateKey });
    const err = await rpcError(client.getRegisterTicket({}, { timeoutMs: 5000 }));
    expect(err.code).toBe(status.UNAVAILABLE);
    client.close();
  });

  test("a client refuses a server under its CA that is not the server it expects, and says why", async () => {
    const other = testNode(ca).id;
    const client = clientOf(Management, { server: expecting(ca.certificate, other), certificate: owner.certificate, privateKey: owner.key.privateKey });
    expect(await client.connect(5000)).toBe("failed");
    const err = await rpcError(client.getRegisterTicket({}, { timeoutMs: 5000 }));
    expect(err.code).toBe(status.UNAVAILABLE);
    expect(err.details).toContain(`server identity refused: expected ${other}, got ${serving.id}`);
    client.close();
  });

  test("a caller's certificate is verified once per connection, not once per call", async () => {
    const client = clientOf(Management, asNode);
    const verify = spyOn(X509Certificate.prototype, "verify");
    try {
      for (let i = 0; i < 5; i++) await client.getClusterInfo({});
      expect(verify).toHaveBeenCalledTimes(1);
      // Another connection is verified on its own.
      const another = clientOf(Management, asNode);
      await another.getClusterInfo({});
      another.close();
      expect(verify).toHaveBeenCalledTimes(2);
    } finally {
      verify.mockRestore();
      client.close();
    }
  });

  test("a certificate that expires while its connection is open is refused on the connection's next call", async () => {
    const { key, shortLived } = shortLivedNode();
    const client = clientOf(Management, { server: expecting(ca.certificate), certificate: shortLived, privateKey: key.privateKey });
    await client.getClusterInfo({});
    await eventually(
      async () => {
        const err = await rpcError(client.getClusterInfo({}));
        expect(err.code).toBe(status.UNAUTHENTICATED);
        expect(err.details).toBe("client certificate not accepted: certificate has expired");
      },
      { timeoutMs: 20_000, intervalMs: 250 },
    );
    client.close();
  }, 30_000);

  test("domain errors map to their status codes and unknown errors to INTERNAL", async () => {
    const client = clientOf(Management, asOwner);
    const notFound = await rpcError(client.approveNode({ id: "node-x" }));
    expect(notFound.code).toBe(status.NOT_FOUND);
    expect(notFound.details).toBe("node node-x not found");
    const internal = await rpcError(client.updateNodeRoles({ id: "node-a" }));
    expect(internal.code).toBe(status.INTERNAL);
    expect(internal.details).toBe("internal error: disk on fire");
    client.close();
  });

  test("server streams deliver every message and end", async () => {
    const client = clientOf(Management, asOwner);
    const ids: string[] = [];
    for await (const node of client.getNodes({})) ids.push(node.id);
    expect(ids).toEqual(["node-a", "node-b"]);
    client.close();
  });

  test("cancelling a stream on the client aborts the handler on the server", async () => {
    const client = clientOf(Curator, asNode);
    const controller = new AbortController();
    const seen: string[] = [];
    let caught: unknown;
    try {
      for await (const event of client.watch({ kind: { case: "nodesInCluster", value: {} } }, { signal: controller.signal })) {
        seen.push(event.progress === WatchEvent_Progress.LAST_BACKLOGGED ? "backlog-end" : event.nodes[0]!.id);
        if (seen.length === 2) controller.abort(new Error("done watching"));
      }
    } catch (err) {
      caught = err;
    }
    expect(seen).toEqual(["node-a", "backlog-end"]);
    expect((caught as Error).message).toBe("done watching");
    const { eventually } = await import("../testing/mod.ts");
    await eventually(() => expect(watchCancelled).toEqual(["Curator/Watch"]));
    client.close();
  });

  test("a stream whose caller's certificate expires while it is open ends, UNAUTHENTICATED, and its handler is stopped", async () => {
    const { key, shortLived } = shortLivedNode();
    const client = clientOf(Curator, { server: expecting(ca.certificate), certificate: shortLived, privateKey: key.privateKey });
    const seen: number[] = [];
    const ended = await rpcError(
      (async () => {
        for await (const event of client.watch({ kind: { case: "nodesInCluster", value: {} } })) seen.push(event.nodes.length);
      })(),
    );
    expect(seen).toEqual([1, 0]);
    expect(ended.code).toBe(status.UNAUTHENTICATED);
    expect(ended.details).toBe("the client certificate expired while its stream was open");
    await eventually(() => expect(watchCancelled).toEqual(["Curator/Watch", "Curator/Watch"]));
    client.close();
  }, 30_000);

  test("bidirectional streams answer each request and end when the client half-closes", async () => {
    const client = clientOf(Curator, asNode);
    async function* three() {
      for (let i = 0; i < 3; i++) yield {};
    }
    let answers = 0;
    for await (const _ of client.heartbeat(three())) answers++;
    expect(answers).toBe(3);
    const { eventually } = await import("../testing/mod.ts");
    await eventually(() => expect(heartbeatsSeen).toContain("node:3"));
    client.close();
  });

  test("a stream is audited once, when it ends, with how it ended: OK, its error, or its refusal; a client stream by its first request", async () => {
    // Streams of the tests before may still be ending: only this test's count.
    // A refused call was never parsed: it has no request, and is the owner's.
    const from = streamsAudited.length;
    const mine = (call: AuditedCall) => call.peer?.kind === "owner" || /node-failing|"1234"/.test(JSON.stringify(call.request ?? null, (_, v) => (typeof v === "bigint" ? String(v) : v)));
    const client = clientOf(Curator, asNode);
    const watched = client.watch({ kind: { case: "nodeInCluster", value: { nodeId: "node-failing" } } });
    let got = 0;
    const failed = await rpcError(
      (async () => {
        for await (const _ of watched) got++;
      })(),
    );
    expect(got).toBe(1);
    expect(failed.code).toBe(status.FAILED_PRECONDITION);
    async function* two() {
      yield { sentAtMs: 1234n };
      yield { sentAtMs: 5678n };
    }
    for await (const _ of client.heartbeat(two())) {
      // Drained.
    }
    const owners = clientOf(Curator, asOwner);
    await rpcError(
      (async () => {
        for await (const _ of owners.watch({ kind: { case: "nodeInCluster", value: { nodeId: "node-audited" } } })) {
          // Refused before it opens.
        }
      })(),
    );
    await eventually(() => expect(streamsAudited.slice(from).filter(mine).length).toBe(3));
    const [watch, heartbeat, refused] = streamsAudited.slice(from).filter(mine);
    expect(watch).toMatchObject({ method: "Curator/Watch", request: { kind: { case: "nodeInCluster", value: { nodeId: "node-failing" } } } });
    expect(watch!.error).toBeInstanceOf(FailedPreconditionError);
    expect(heartbeat).toMatchObject({ method: "Curator/Heartbeat", request: { sentAtMs: 1234n } });
    expect(heartbeat!.error).toBeUndefined();
    expect(refused!.method).toBe("Curator/Watch");
    expect(refused!.peer?.kind).toBe("owner");
    expect(refused!.error).toBeDefined();
    client.close();
    owners.close();
  });

  test("a bidirectional stream is checked against its policy like any call", async () => {
    const client = clientOf(Curator, asOwner);
    async function* one() {
      yield {};
    }
    let caught: unknown;
    try {
      for await (const _ of client.heartbeat(one())) throw new Error("the owner got an answer");
    } catch (err) {
      caught = err;
    }
    expect(caught).toBeInstanceOf(RpcError);
    expect((caught as RpcError).code).toBe(status.PERMISSION_DENIED);
    expect((caught as RpcError).details).toBe("only cluster nodes may call this");
    client.close();
  });

  test("malformed and oversized requests are INVALID_ARGUMENT, and the server keeps serving", async () => {
    const raw = new GrpcClient(target, channelCredentials(asOwner), channelOptions());
    const send = (bytes: Buffer) =>
      new Promise<{ code: number; details: string }>((resolve) => {
        raw.makeUnaryRequest(
          "/nodecore.api.Management/ApproveNode",
          (b: Buffer) => b,
          (b: Buffer) => b,
          bytes,
          new Metadata(),
          {},
          (err) => resolve({ code: err?.code ?? 0, details: err?.details ?? "" }),
        );
      });
    const malformed = await send(Buffer.from([0x0a, 0xff, 0xff, 0xff]));
    expect(malformed.code).toBe(status.INVALID_ARGUMENT);
    expect(malformed.details).toContain("malformed nodecore.api.ApproveNodeRequest");
    const oversized = await send(Buffer.alloc(MAX_REQUEST_BYTES + 1));
    expect(oversized.code).toBe(status.INVALID_ARGUMENT);
    expect(oversized.details).toContain("more than the limit");
    raw.close();
    const client = clientOf(Management, asOwner);
    expect((await client.getRegisterTicket({})).ticket.length).toBe(3);
    client.close();
  });
});

describe("certificates", () => {
  test("server certificates name their node, never a name shared by every node", () => {
    expect(serving.certificate.subjectAltName).toBe(`DNS:${serving.id}, IP Address:127.0.0.1`);
    expect(serving.certificate.checkIssued(ca.certificate)).toBe(true);
    expect(foreignOwner.certificate.verify(ca.certificate.publicKey)).toBe(false);
  });
});

describe("a stream's writer", () => {
  // A followed stream to a slow reader waits for "drain" again and again on
  // the same call and signal; each wait used to leave an abort listener on
  // the signal (and, when aborted, a drain listener on the call) behind.
  test("takes its listeners off after every wait for the reader", async () => {
    const { EventEmitter } = await import("node:events");
    const { writeResponses } = await import("./service.ts");
    /** A call whose reader is never ready: every write waits for a drain, which comes soon after. */
    class SlowReader extends EventEmitter {
      cancelled = false;
      written = 0;
      ended = false;
      write(): boolean {
        this.written++;
        setImmediate(() => this.emit("drain"));
        return false;
      }
      end(): void {
        this.ended = true;
      }
    }
    const call = new SlowReader();
    const controller = new AbortController();
    let abortListeners = 0;
    const add = controller.signal.addEventListener.bind(controller.signal);
    const remove = controller.signal.removeEventListener.bind(controller.signal);
    controller.signal.addEventListener = ((type: string, listener: EventListener, options?: AddEventListenerOptions) => {
      if (type === "abort") abortListeners++;
      add(type, listener, options);
    }) as typeof controller.signal.addEventListener;
    controller.signal.removeEventListener = ((type: string, listener: EventListener) => {
      if (type === "abort") abortListeners--;
      remove(type, listener);
    }) as typeof controller.signal.removeEventListener;
    async function* responses() {
      for (let i = 0; i < 500; i++) yield { ticket: new Uint8Array([i % 256]) };
    }
    await writeResponses(
      call as never,
      responses(),
      () => Buffer.from([1]),
      controller.signal,
      () => undefined,
    );
    expect({ written: call.written, ended: call.ended }).toEqual({ written: 500, ended: true });
    expect(abortListeners).toBe(0);
    expect(call.listenerCount("drain")).toBe(0);
    // Aborted while it waits: the drain listener goes too.
    const aborted = new AbortController();
    const stuck = Object.assign(new EventEmitter(), { cancelled: true, write: () => false, end: () => {} });
    const writing = writeResponses(
      stuck as never,
      responses(),
      () => Buffer.from([1]),
      aborted.signal,
      () => undefined,
    );
    await Bun.sleep(10);
    aborted.abort();
    await writing;
    expect(stuck.listenerCount("drain")).toBe(0);
  });
});
