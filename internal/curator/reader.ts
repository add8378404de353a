// What code beside the curator reads of the curator's state, from the local
// etcd member of a consensus node: the scheduled backups (what to back up,
// and the cluster CA that signs it) and the Kubernetes controller (the etcd
// CA for the apiserver's client certificate, the workers, and the owner's
// add-on manifests), and what a
// backup's snapshot holds (curatorSnapshotState). Reads only:
// the curator is the one writer of its key space, through its leader,
// fenced; a node reports what the curator must record through a Curator
// call (ReportBackupStatus). No code outside this package names the keys
// (test/key_spaces.test.ts holds that).

import type { Etcd3 } from "etcd3";
import type { BackupSchedule, BackupStatus } from "../../proto/gen/api/management_pb.ts";
import type { ClusterRecord, NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import type { Manifest } from "../../proto/gen/common/common_pb.ts";
import type { CA } from "../pki/mod.ts";
import { BackupFormatError, type SnapshotState } from "../backup/mod.ts";
import { CuratorStore, ETCD_PREFIX, StoreError } from "./store.ts";

export interface CuratorReader {
  backupSchedule(): Promise<BackupSchedule | undefined>;
  backupStatus(): Promise<BackupStatus | undefined>;
  cluster(): Promise<ClusterRecord | undefined>;
  nodes(): Promise<NodeRecord[]>;
  /** The owner's add-on manifests (the controller's reconciler applies them). */
  manifests(): Promise<Manifest[]>;
  /** The cluster CA (it signs backups) or the etcd CA (it certifies the apiserver's etcd client), with its key. */
  ca(kind: "cluster" | "etcd"): Promise<CA>;
}

/** A read-only view of the curator's state in `etcd` (the local member's client). */
export function curatorReader(etcd: Etcd3): CuratorReader {
  const store = new CuratorStore(etcd.namespace(ETCD_PREFIX));
  return {
    backupSchedule: () => store.backupSchedule(),
    backupStatus: () => store.backupStatus(),
    cluster: () => store.cluster(),
    nodes: async () => (await store.nodes()).nodes,
    manifests: async () => (await store.manifests()).value,
    ca: (kind) => store.ca(kind),
  };
}

/**
 * What a backup's snapshot holds, read from the throwaway member that
 * serves it (backup's readSnapshot takes this as its reader, from the
 * callers that may import the curator: the backups worker, and cmd/init for
 * a restore's enrolment). A snapshot without the records every cluster has
 * is not a nodecore cluster's, and says so.
 */
export async function curatorSnapshotState(client: Etcd3, revision: number): Promise<SnapshotState> {
  const store = new CuratorStore(client.namespace(ETCD_PREFIX));
  const cluster = await store.cluster();
  if (!cluster) throw new BackupFormatError("the snapshot holds no cluster record: it is not a nodecore cluster's");
  const ca = async (kind: "cluster" | "etcd") => {
    try {
      return await store.ca(kind);
    } catch (err) {
      if (err instanceof StoreError) throw new BackupFormatError(`the snapshot holds no ${kind} CA: it is not a nodecore cluster's`);
      throw err;
    }
  };
  return { cluster, clusterCA: await ca("cluster"), etcdCA: await ca("etcd"), nodes: (await store.nodes()).nodes, revision };
}
