// The enrolment flows against an impostor curator on loopback: a server
// that holds a genuine node certificate of the cluster must never receive
// a registration (with its ticket) or a join (which would hand it nothing,
// but would let it feed the node a made-up unlock key).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { join } from "node:path";
import { SealedConfigurationSchema } from "../../proto/gen/api/configuration_pb.ts";
import { ClusterDirectorySchema } from "../../proto/gen/common/common_pb.ts";
import { startImpostorCurator, startTestCluster, type ImpostorCurator, type TestCluster } from "../curator/test_cluster.ts";
import { storageLayout } from "../localstorage/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { generateKeyPair, rawPrivateKey, rawPublicKey } from "../pki/mod.ts";
import { eventually, tempDir, testNode } from "../testing/mod.ts";
import type { DataStorage } from "./data_storage.ts";
import { joinCluster } from "./flow_join.ts";
import { registerNode } from "./flow_register.ts";

let cluster: TestCluster;
let impostor: ImpostorCurator;
const dir = tempDir("nodecore-flows-");

/** Stand-in storage: these flows must never get as far as opening data. */
const neverOpened: DataStorage = {
  open: () => {
    throw new Error("the data storage was opened, but no curator should have been trusted");
  },
};

beforeAll(async () => {
  cluster = await startTestCluster();
  impostor = await startImpostorCurator(testNode(cluster.clusterCA, { ipAddresses: ["127.0.0.1"] }), cluster.clusterCA.certificate);
}, 120_000);
afterAll(async () => {
  impostor?.close();
  await cluster?.close();
  dir[Symbol.dispose]();
});

const directory = () => create(ClusterDirectorySchema, { nodes: [{ publicKey: new Uint8Array(0), addresses: [{ host: impostor.endpoint.host }] }] });

describe("enrolment against an impostor curator", () => {
  test("a registering node sends it neither ticket nor key, and says it cannot trust it", async () => {
    const { logger, entries } = captureLogger("register");
    const controller = new AbortController();
    const flow = registerNode({
      ticket: new Uint8Array(32).fill(7),
      caCertificate: cluster.clusterCA.certificate,
      directory: directory(),
      layout: storageLayout(join(dir.path, "register")),
      storage: neverOpened,
      logger,
      signal: controller.signal,
      curatorPort: impostor.endpoint.port,
    }).catch((e: unknown) => e);
    await eventually(() => expect(entries.some((e) => e.message.includes("no curator could be trusted") && e.message.includes("not a curator certificate"))).toBe(true));
    controller.abort(new Error("test over"));
    expect(((await flow) as Error).message).toBe("test over");
    expect(impostor.calls).toEqual([]);
  });

  test("a joining node does not ask it for its unlock key, and says it cannot trust it", async () => {
    const { logger, entries } = captureLogger("join");
    const controller = new AbortController();
    const joinKey = generateKeyPair();
    const sealed = create(SealedConfigurationSchema, {
      nodeUnlockKey: new Uint8Array(32),
      joinKey: rawPrivateKey(joinKey.privateKey),
      clusterCa: new Uint8Array(cluster.clusterCA.certificate.raw),
      clusterDirectory: { nodes: [{ publicKey: rawPublicKey(generateKeyPair().publicKey), addresses: [{ host: "127.0.0.1" }] }] },
    });
    const flow = joinCluster({
      sealed,
      ownAddress: "127.0.0.2",
      layout: storageLayout(join(dir.path, "join")),
      storage: neverOpened,
      logger,
      signal: controller.signal,
      curatorPort: impostor.endpoint.port,
    }).catch((e: unknown) => e);
    await eventually(() => expect(entries.some((e) => e.message === "waiting for a curator to let this node join" && String(e.fields.lastError).includes("no curator could be trusted"))).toBe(true));
    controller.abort(new Error("test over"));
    expect(((await flow) as Error).message).toBe("test over");
    expect(impostor.calls).toEqual([]);
  });
});

describe("a joining node whose sealed directory is older than the cluster's consensus", () => {
  test("asks a genuine curator that answers at a directory address as another node by address, and gets the cluster's own answer", async () => {
    const { logger, entries } = captureLogger("join");
    const joinKey = generateKeyPair();
    // The directory names a node that is gone; the test cluster's curator (another node, under the same CA) answers at its address.
    const sealed = create(SealedConfigurationSchema, {
      nodeUnlockKey: new Uint8Array(32),
      joinKey: rawPrivateKey(joinKey.privateKey),
      clusterCa: new Uint8Array(cluster.clusterCA.certificate.raw),
      clusterDirectory: { nodes: [{ publicKey: rawPublicKey(generateKeyPair().publicKey), addresses: [{ host: cluster.endpoint.host }] }] },
    });
    const outcome = await joinCluster({
      sealed,
      ownAddress: "127.0.0.2",
      layout: storageLayout(join(dir.path, "join-by-address")),
      storage: neverOpened,
      logger,
      signal: AbortSignal.timeout(20_000),
      curatorPort: cluster.endpoint.port,
    }).catch((e: unknown) => e as Error);
    expect(entries.some((e) => e.message.startsWith("curators of this cluster answer as other nodes than the sealed directory names") && e.fields.addresses === cluster.endpoint.host)).toBe(true);
    // The curator was asked, and answered for the cluster: it knows no node with this join key.
    expect(String((outcome as Error).message)).toStartWith("the cluster refused to let this node join: ");
  }, 30_000);
});
