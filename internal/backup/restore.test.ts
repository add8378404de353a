// Restoring a real etcd snapshot of a test cluster (internal/curator's
// test cluster: etcd and a curator on loopback) with the built etcdutl, and
// reading it back through a throwaway member.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { startTestCluster, type TestCluster } from "../curator/test_cluster.ts";
import { freePort, freePorts, systemTree, tempDir, treeEtcd } from "../testing/mod.ts";
import { backupChunks } from "../curator/backup.ts";
import { rawPrivateKey, rawPublicKey } from "../pki/mod.ts";
import { BackupFormatError, decryptBackup } from "./format.ts";
import { readSnapshot } from "./restore.ts";
import { curatorSnapshotState } from "../curator/reader.ts";

let cluster: TestCluster;
const etcdutl = () => join(systemTree(), "usr", "bin", "etcdutl");

beforeAll(async () => {
  cluster = await startTestCluster();
}, 120_000);
afterAll(async () => {
  await cluster?.close();
});

/** The test cluster's backup, as Management.Backup streams it, decrypted as ctl does: etcd's snapshot. */
async function snapshotBytes(): Promise<Uint8Array> {
  const chunks: Uint8Array[] = [];
  const about = { caFingerprint: cluster.clusterCA.certificate.fingerprint256, nodeCount: 1, nodecoreVersion: "test" };
  for await (const chunk of backupChunks(cluster.etcd, rawPublicKey(cluster.ownerKey.publicKey), about, cluster.clusterCA.privateKey, AbortSignal.timeout(30_000))) chunks.push(chunk.data);
  return decryptBackup(Buffer.concat(chunks), rawPrivateKey(cluster.ownerKey.privateKey)).snapshot;
}

describe("reading a snapshot through a throwaway member", () => {
  test("gives the cluster record, both CAs and every node record, and leaves nothing behind", async () => {
    using dir = tempDir();
    const scratch = join(dir.path, "scratch");
    const state = await readSnapshot({ etcd: treeEtcd(), etcdutl: etcdutl(), read: curatorSnapshotState, snapshot: await snapshotBytes(), scratch });
    expect(state.clusterCA.certificate.fingerprint256).toBe(cluster.clusterCA.certificate.fingerprint256);
    expect(state.etcdCA.certificate.fingerprint256).toBe(cluster.etcdCA.certificate.fingerprint256);
    expect(Buffer.from(state.cluster.ownerPublicKey).equals(Buffer.from(rawPublicKey(cluster.ownerKey.publicKey)))).toBe(true);
    expect(state.nodes.map((n) => n.id)).toEqual([cluster.node.id]);
    expect(Buffer.from(state.nodes[0]!.clusterUnlockKey).equals(Buffer.from(cluster.node.clusterUnlockKey))).toBe(true);
    expect(state.revision).toBeGreaterThan(0);
    expect(existsSync(scratch)).toBe(false);
  }, 60_000);

  test("a port taken between the probe and etcd's bind: the member starts again on new ports; taken every time, the error says so, and blames no snapshot", async () => {
    using dir = tempDir();
    const scratch = join(dir.path, "scratch");
    const snapshot = await snapshotBytes();
    // Another process holds a port the probe had found free.
    const taken = await freePort();
    const holder = Bun.listen({ hostname: "127.0.0.1", port: taken, socket: { data() {} } });
    try {
      const picked: number[][] = [];
      const firstTaken = async (): Promise<[number, number]> => {
        const [client, peer] = picked.length === 0 ? [taken, await freePort()] : (freePorts(2) as [number, number]);
        picked.push([client, peer]);
        return [client, peer];
      };
      const state = await readSnapshot({ etcd: treeEtcd(), etcdutl: etcdutl(), read: curatorSnapshotState, snapshot, scratch, ports: firstTaken });
      expect(state.nodes.map((n) => n.id)).toEqual([cluster.node.id]);
      expect(picked.length).toBe(2);
      expect(existsSync(scratch)).toBe(false);

      let tries = 0;
      const alwaysTaken = async (): Promise<[number, number]> => (tries++, [await freePort(), taken]);
      const error = await readSnapshot({ etcd: treeEtcd(), etcdutl: etcdutl(), read: curatorSnapshotState, snapshot, scratch, ports: alwaysTaken }).catch((err: unknown) => err);
      expect(error).toBeInstanceOf(Error);
      expect(error).not.toBeInstanceOf(BackupFormatError);
      expect((error as Error).message).toBe("the snapshot's etcd could not listen: its loopback ports were taken by other processes 3 times in a row");
      expect(tries).toBe(3);
      expect(existsSync(scratch)).toBe(false);
    } finally {
      holder.stop(true);
    }
  }, 120_000);

  test("a damaged snapshot is refused by etcdutl's checksum, with why, and leaves nothing behind", async () => {
    using dir = tempDir();
    const scratch = join(dir.path, "scratch");
    const bytes = Buffer.from(await snapshotBytes());
    bytes[100]! ^= 0xff;
    const error = await readSnapshot({ etcd: treeEtcd(), etcdutl: etcdutl(), read: curatorSnapshotState, snapshot: bytes, scratch }).catch((err: unknown) => err);
    expect(error).toBeInstanceOf(BackupFormatError);
    expect((error as Error).message).toStartWith("etcdutl could not restore the snapshot: ");
    expect(readdirSync(dir.path)).toEqual([]);
  }, 60_000);
});
