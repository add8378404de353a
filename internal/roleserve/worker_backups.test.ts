// The proof of a scheduled backup, against a real snapshot of a test
// cluster (etcd and a curator on loopback) restored with the built etcdutl,
// and backups made bad on purpose; and which backups are kept.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create, toBinary } from "@bufbuild/protobuf";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SealedConfigurationSchema } from "../../proto/gen/api/configuration_pb.ts";
import { dataPartitionKey } from "../cluster/mod.ts";
import { backupChunks } from "../curator/mod.ts";
import { startTestCluster, type TestCluster } from "../curator/test_cluster.ts";
import { storageLayout } from "../localstorage/mod.ts";
import type { X509Certificate } from "node:crypto";
import { rawPublicKey } from "../pki/mod.ts";
import { systemTree, tempDir, testCA, treeEtcd } from "../testing/mod.ts";
import { ETCD_MIN_FREE_BYTES } from "../consensus/mod.ts";
import { backupRoomProblem, backupsToPrune, proveSnapshot } from "./worker_backups.ts";

let cluster: TestCluster;
let snapshot: Uint8Array;
const dir = tempDir("nodecore-backups-");

beforeAll(async () => {
  cluster = await startTestCluster();
  const plain: Uint8Array[] = [];
  const about = { caFingerprint: cluster.clusterCA.certificate.fingerprint256, nodeCount: 1, nodecoreVersion: "test" };
  for await (const _ of backupChunks(cluster.etcd, rawPublicKey(cluster.ownerKey.publicKey), about, cluster.clusterCA.privateKey, AbortSignal.timeout(30_000), (blob) =>
    plain.push(Buffer.from(blob)),
  ));
  snapshot = Buffer.concat(plain);
}, 120_000);
afterAll(async () => {
  await cluster?.close();
  dir[Symbol.dispose]();
});

/** The test cluster's node as the proof sees it: its credentials, its sealed node half, and storage that a given key opens. */
function setup(name: string, opts: { ca?: X509Certificate; nodeId?: string; opens?: boolean } = {}) {
  const layout = storageLayout(join(dir.path, name));
  mkdirSync(join(layout.esp.sealed, ".."), { recursive: true });
  writeFileSync(
    layout.esp.sealed,
    toBinary(SealedConfigurationSchema, create(SealedConfigurationSchema, { nodeUnlockKey: new Uint8Array(32).fill(1), joinKey: new Uint8Array(32), clusterCa: new Uint8Array(1) })),
  );
  const credentials = { ...cluster.node.credentials, nodeId: opts.nodeId ?? cluster.node.id, ca: opts.ca ?? cluster.clusterCA.certificate };
  const tried: Uint8Array[] = [];
  const storage = {
    open: () => Promise.reject(new Error("not here")),
    opens: async (key: Uint8Array) => {
      tried.push(key);
      return opts.opens ?? true;
    },
  };
  return { options: { etcd: treeEtcd(), etcdutl: () => join(systemTree(), "usr", "bin", "etcdutl"), storage, layout }, membership: { credentials }, scratch: join(dir.path, name, "scratch"), tried };
}

describe("proving a scheduled backup", () => {
  test("a snapshot of this cluster restores, holds this node, and its cluster half is tried on the node's data", async () => {
    const { options, membership, scratch, tried } = setup("good");
    const proof = await proveSnapshot(options, membership, snapshot, scratch);
    expect(proof.nodes).toBe(1);
    // The node half from its sealed configuration, with its cluster half from the snapshot.
    expect(tried.map((k) => Buffer.from(k).toString("hex"))).toEqual([Buffer.from(dataPartitionKey(new Uint8Array(32).fill(1), cluster.node.clusterUnlockKey)).toString("hex")]);
  }, 60_000);

  test("a snapshot of a cluster with another CA is refused, naming both", async () => {
    const other = testCA().certificate;
    const { options, membership, scratch } = setup("wrong-ca", { ca: other });
    await expect(proveSnapshot(options, membership, snapshot, scratch)).rejects.toThrow(
      `the backup's CA is ${cluster.clusterCA.certificate.fingerprint256}, not this cluster's ${other.fingerprint256}`,
    );
  }, 60_000);

  test("a snapshot without the node's record, or whose half does not open its data, is refused", async () => {
    const stranger = setup("stranger", { nodeId: "node-0123456789abcdef" });
    await expect(proveSnapshot(stranger.options, stranger.membership, snapshot, stranger.scratch)).rejects.toThrow("the backup has no record of node-0123456789abcdef");
    const locked = setup("locked", { opens: false });
    await expect(proveSnapshot(locked.options, locked.membership, snapshot, locked.scratch)).rejects.toThrow("this node's cluster half in the backup does not open its data partition");
  }, 60_000);

  test("a damaged snapshot is refused by the restore itself", async () => {
    const { options, membership, scratch } = setup("damaged");
    const bad = Buffer.from(snapshot);
    bad[200]! ^= 0xff;
    await expect(proveSnapshot(options, membership, bad, scratch)).rejects.toThrow("etcdutl could not restore the snapshot");
  }, 60_000);
});

describe("which backups stay", () => {
  test("the newest `keep`, and the newest proven one even when it is older", () => {
    expect(backupsToPrune(["d", "c", "b", "a"], 2, "c")).toEqual(["b", "a"]);
    expect(backupsToPrune(["d", "c", "b", "a"], 2, "a")).toEqual(["b"]);
    expect(backupsToPrune(["d", "c", "b", "a"], 2, undefined)).toEqual(["b", "a"]);
    expect(backupsToPrune(["a"], 3, undefined)).toEqual([]);
  });
});

describe("room for a backup", () => {
  const MiB = 1024 * 1024;
  test("fits when the data partition keeps etcd's reserve beside the file, and the ephemeral file system takes the proof", () => {
    expect(backupRoomProblem(10 * MiB, { data: 200 * MiB, ephemeral: 100 * MiB })).toBeUndefined();
    // A large database keeps its own size free, more than the reserve.
    expect(backupRoomProblem(500 * MiB, { data: 1100 * MiB, ephemeral: 1100 * MiB })).toBeUndefined();
  });

  test("a data partition that the file would leave with less than etcd's reserve is named, with what it has and needs", () => {
    const problem = backupRoomProblem(10 * MiB, { data: 10 * MiB + ETCD_MIN_FREE_BYTES, ephemeral: 100 * MiB });
    expect(problem).toBe("the data partition has 74.0 MiB free; a backup of the 10.0 MiB database needs 75.1 MiB there (the file, and room left for etcd)");
    expect(backupRoomProblem(500 * MiB, { data: 900 * MiB, ephemeral: 2000 * MiB })).toStartWith("the data partition has 900.0 MiB free");
  });

  test("an ephemeral file system too small for the plain copy and the throwaway member is named", () => {
    expect(backupRoomProblem(100 * MiB, { data: 1000 * MiB, ephemeral: 150 * MiB })).toBe(
      "the ephemeral file system has 150.0 MiB free; proving a backup of the 100.0 MiB database needs 216.0 MiB there (its plain copy and a throwaway member)",
    );
  });
});
