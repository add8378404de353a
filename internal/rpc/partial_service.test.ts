import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { testCA, testNode } from "../testing/mod.ts";
import { RpcError, Status, addService, channelCredentials, channelOptions, createClient, createServer, listen, partialService, serverCredentials, type ServiceClient } from "./mod.ts";

// A Curator service of which only UpdateNodeStatus is given, over mutual
// TLS on loopback.

const ca = testCA();
const server = testNode(ca, { ipAddresses: ["127.0.0.1"] });
const caller = testNode(ca);
const grpc = createServer();
let client: ServiceClient<typeof Curator>;
/** The node IDs of the status updates served. */
const updated: string[] = [];

beforeAll(async () => {
  const impl = partialService(Curator, {
    async updateNodeStatus(request) {
      updated.push(request.nodeId);
      return {};
    },
  });
  addService(grpc, Curator, impl, {
    ca: () => ca.certificate,
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
  });
  const { port } = await listen(grpc, "127.0.0.1:0", serverCredentials({ certificate: server.certificate, privateKey: server.key.privateKey }));
  const expected = { ca: ca.certificate, verify: () => undefined };
  client = createClient(Curator, `127.0.0.1:${port}`, {
    credentials: channelCredentials({ server: expected, certificate: caller.certificate, privateKey: caller.key.privateKey }),
    channelOptions: channelOptions(),
  });
});
afterAll(() => {
  client?.close();
  grpc.forceShutdown();
});

async function failure(call: () => Promise<unknown>): Promise<RpcError> {
  const err = await call().then(
    () => undefined,
    (e: unknown) => e,
  );
  if (!(err instanceof RpcError)) throw new Error(`expected an RpcError, got ${String(err)}`);
  return err;
}

describe("partialService", () => {
  test("serves the methods it is given", async () => {
    await client.updateNodeStatus({ nodeId: caller.id });
    expect(updated).toEqual([caller.id]);
  });

  test("answers UNIMPLEMENTED, naming the method, for a unary method it is not given", async () => {
    const err = await failure(() => client.joinNode({}));
    expect(err.code).toBe(Status.UNIMPLEMENTED);
    expect(err.details).toBe("Curator/JoinNode is not implemented");
  });

  test("ends a server stream it is not given with UNIMPLEMENTED before any message", async () => {
    const events: unknown[] = [];
    const err = await failure(async () => {
      for await (const event of client.watch({})) events.push(event);
    });
    expect(err.code).toBe(Status.UNIMPLEMENTED);
    expect(err.details).toBe("Curator/Watch is not implemented");
    expect(events).toEqual([]);
  });

  test("ends a bidirectional stream it is not given with UNIMPLEMENTED", async () => {
    async function* updates() {
      yield { sentAtMs: BigInt(Date.now()) };
    }
    const err = await failure(async () => {
      for await (const _ of client.heartbeat(updates())) throw new Error("the stream answered");
    });
    expect(err.code).toBe(Status.UNIMPLEMENTED);
    expect(err.details).toBe("Curator/Heartbeat is not implemented");
  });
});
