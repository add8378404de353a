// Local services: a unix socket, callers on this node, and a wall between
// them and the TLS services in both directions.

import { afterAll, expect, test } from "bun:test";
import { statSync } from "node:fs";
import { join } from "node:path";
import { AAA } from "../../proto/gen/api/management_pb.ts";
import { addService, channelCredentials, channelOptions, createClient, createServer, listen, listenLocal, localCredentials, RpcError, serverCredentials, Status } from "./mod.ts";
import { freePorts, tempDir, testCA, testNode } from "../testing/mod.ts";

const dir = tempDir("nodecore-local-rpc-");
const ca = testCA();
const serving = testNode(ca, { ipAddresses: ["127.0.0.1"] });
const caller = testNode(ca);
const socket = join(dir.path, "plugin", "local.sock");
const [port] = freePorts(1) as [number];

/** AAA's one method, answering who called, served under `policy`. */
function serve(policy: "local" | "node") {
  const server = createServer();
  addService(
    server,
    AAA,
    {
      async escrow(_request, ctx) {
        return { ownerCertificate: new TextEncoder().encode(ctx.peer.kind) };
      },
    },
    { ca: () => ca.certificate, policy: { escrow: policy } },
  );
  return server;
}

const local = serve("local");
const nodeOnly = serve("node");
const overTls = serve("local");

afterAll(() => {
  for (const s of [local, nodeOnly, overTls]) s.forceShutdown();
  dir[Symbol.dispose]();
});

test("a local service answers a process on this node through its socket (0600), as a local caller", async () => {
  await listenLocal(local, socket);
  expect(statSync(socket).mode & 0o777).toBe(0o600);
  expect(statSync(join(dir.path, "plugin")).mode & 0o777).toBe(0o700);
  const client = createClient(AAA, `unix:${socket}`, { credentials: localCredentials() });
  try {
    const answer = await client.escrow({});
    expect(new TextDecoder().decode(answer.ownerCertificate)).toBe("local");
  } finally {
    client.close();
  }
  // Bound again (a restarted plugin): the stale socket file is replaced.
  local.forceShutdown();
  const again = serve("local");
  await listenLocal(again, socket);
  again.forceShutdown();
});

test("a local caller may not call a method of another policy, and a TLS caller may not call a local method", async () => {
  const nodeSocket = join(dir.path, "node.sock");
  await listenLocal(nodeOnly, nodeSocket);
  const client = createClient(AAA, `unix:${nodeSocket}`, { credentials: localCredentials() });
  try {
    const refused = await client.escrow({}).catch((err: RpcError) => err);
    expect(refused).toBeInstanceOf(RpcError);
    expect((refused as RpcError).code).toBe(Status.PERMISSION_DENIED);
    expect((refused as RpcError).details).toContain("may call only the node's local services");
  } finally {
    client.close();
  }

  await listen(overTls, `127.0.0.1:${port}`, serverCredentials(serving.tls));
  const remote = createClient(AAA, `127.0.0.1:${port}`, {
    credentials: channelCredentials({ server: { ca: ca.certificate, verify: () => undefined }, certificate: caller.credentials.certificate, privateKey: caller.credentials.privateKey }),
    channelOptions: channelOptions(serving.id),
  });
  try {
    const refused = await remote.escrow({}).catch((err: RpcError) => err);
    expect((refused as RpcError).code).toBe(Status.PERMISSION_DENIED);
    expect((refused as RpcError).details).toContain("only a process on this node may call this");
  } finally {
    remote.close();
  }
});
