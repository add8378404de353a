// The cluster's side of persistent volumes: what no worker's provisioner
// (provisioner.ts) can do, because it is about nodes that are not there or
// about every node at once. Every controller runs it beside the reconciler
// (service_controller.ts), as the node core's admin, after each look at
// the cluster's records; each step is safe to race with another
// controller's.
//
//   a PV of volumes.nodecore.local on a node the records no longer hold
//   (ctl node reset, ctl node delete), seen so in two looks in a row
//     ──▶ a Warning on its claim, VolumeNodeGone: the node, that the data
//         went with its key, and what to do
//     ──▶ the PV deleted, its protection finalizer lifted (the data is
//         gone; nothing will ever unbind it) ──▶ the PV controller marks
//         the claim Lost, so nothing waits on it forever
//   a CSIStorageCapacity of a node that is not a worker now
//     ──▶ deleted: the scheduler stops counting room that cannot be given
//   a Pending claim of class local larger than every worker can give
//     ──▶ a Warning, NotEnoughRoom, naming each worker's room (the
//         scheduler's own event on the pod names no figure)
//
// A node that is only not a worker now keeps its volumes and their PVs:
// its data is on its disk, and comes back with the role.
//
// Deciding (volumesDecision) is a pure function over what was listed,
// tested as data; doing it (sweepVolumes) is tested against a real
// apiserver in test/kubernetes_controller_process.test.ts.

import type { CoreV1Api, StorageV1Api, V1CSIStorageCapacity, V1PersistentVolume, V1PersistentVolumeClaim } from "@kubernetes/client-node";
import { formatBytes, type Logger } from "../log/mod.ts";
import { clientConfiguration, statusOf, type ClientIdentity } from "./api_client.ts";
import { claimEvents, type ClaimEvent } from "./claim_events.ts";
import { CSI_DRIVER } from "./csi.ts";
import { CAPACITY_NAMESPACE, CAPACITY_PREFIX, quantityBytes, volumeNode } from "./provisioner.ts";
import { STORAGE_CLASS } from "./reconciler.ts";

const HOSTNAME_LABEL = "kubernetes.io/hostname";
/** How many workers' rooms a NotEnoughRoom event names before "and N more". */
const ROOMS_NAMED = 8;

export interface VolumesInput {
  volumes: readonly V1PersistentVolume[];
  claims: readonly V1PersistentVolumeClaim[];
  /** The CSIStorageCapacity objects in CAPACITY_NAMESPACE. */
  capacities: readonly V1CSIStorageCapacity[];
  /** Nodes the records no longer hold, seen so twice in a row. */
  gone: ReadonlySet<string>;
  /** The nodes that hold the kubernetes-worker role. */
  workers: ReadonlySet<string>;
}

export interface OrphanedVolume {
  volume: V1PersistentVolume;
  node: string;
  /** The claim it is bound to, if that claim still exists. */
  claim?: V1PersistentVolumeClaim;
}

export interface VolumesDecision {
  orphaned: OrphanedVolume[];
  /** Names of the CSIStorageCapacity objects of nodes that are not workers. */
  staleCapacities: string[];
  /** Claims no worker has room for, with what the event says. */
  tooLarge: { claim: V1PersistentVolumeClaim; message: string }[];
}

/** The node a CSIStorageCapacity of ours speaks for, if it is ours. */
export function capacityNode(capacity: V1CSIStorageCapacity): string | undefined {
  if (capacity.storageClassName !== STORAGE_CLASS || !capacity.metadata?.name?.startsWith(CAPACITY_PREFIX)) return undefined;
  return capacity.nodeTopology?.matchLabels?.[HOSTNAME_LABEL];
}

export function volumesDecision(input: VolumesInput): VolumesDecision {
  const orphaned: OrphanedVolume[] = [];
  for (const volume of input.volumes) {
    if (volume.spec?.csi?.driver !== CSI_DRIVER) continue;
    const node = volumeNode(volume);
    if (node === undefined || !input.gone.has(node)) continue;
    const ref = volume.spec.claimRef;
    const claim = ref ? input.claims.find((c) => c.metadata?.uid === ref.uid) : undefined;
    orphaned.push({ volume, node, ...(claim ? { claim } : {}) });
  }

  const staleCapacities: string[] = [];
  const rooms = new Map<string, number>();
  for (const capacity of input.capacities) {
    const node = capacityNode(capacity);
    if (node === undefined) continue;
    if (!input.workers.has(node)) {
      staleCapacities.push(capacity.metadata!.name!);
      continue;
    }
    const bytes = quantityBytes(capacity.maximumVolumeSize ?? capacity.capacity);
    if (bytes !== undefined) rooms.set(node, bytes);
  }

  // Judged only when every worker has said what it can give: one that has
  // not may have room.
  const tooLarge: VolumesDecision["tooLarge"] = [];
  const judged = input.workers.size > 0 && [...input.workers].every((w) => rooms.has(w));
  if (judged) {
    const largest = Math.max(...rooms.values());
    const byRoom = [...rooms].sort((a, b) => b[1] - a[1]);
    const named = byRoom.slice(0, ROOMS_NAMED).map(([node, bytes]) => `${node} ${formatBytes(bytes)}`);
    if (byRoom.length > ROOMS_NAMED) named.push(`and ${byRoom.length - ROOMS_NAMED} more with less`);
    for (const claim of input.claims) {
      if (claim.spec?.storageClassName !== STORAGE_CLASS || claim.spec.volumeName || claim.metadata?.deletionTimestamp) continue;
      if ((claim.status?.phase ?? "Pending") !== "Pending") continue;
      const bytes = quantityBytes(claim.spec.resources?.requests?.storage);
      if (bytes === undefined || bytes <= largest) continue;
      tooLarge.push({
        claim,
        message: `no worker has room for ${formatBytes(bytes)}; what each can give new volumes, its own reserve kept: ${named.join(", ")}. Ask for less, free room on a worker, or add one`,
      });
    }
  }
  return { orphaned, staleCapacities, tooLarge };
}

/** What a sweep did, for the log. */
export interface VolumesSwept {
  volumesDeleted: string[];
  capacitiesDeleted: string[];
  /** Nodes named by a volume and missing from the records at this look only: the next look decides. */
  watching: number;
}

/** Lists, decides and acts once. `known` (every node ID) and `workers` come from the cluster's records, read just before. */
export async function sweepVolumes({ api, goneNodes, tell }: VolumesController, records: { known: ReadonlySet<string>; workers: ReadonlySet<string> }, logger: Logger): Promise<VolumesSwept> {
  const [volumes, claims, capacities] = await Promise.all([
    api.core.listPersistentVolume(),
    api.core.listPersistentVolumeClaimForAllNamespaces(),
    api.storage.listNamespacedCSIStorageCapacity({ namespace: CAPACITY_NAMESPACE }),
  ]);
  const named = volumes.items.filter((v) => v.spec?.csi?.driver === CSI_DRIVER).flatMap((v) => volumeNode(v) ?? []);
  const gone = goneNodes.look(records.known, named);
  const decision = volumesDecision({ volumes: volumes.items, claims: claims.items, capacities: capacities.items, gone, workers: records.workers });
  const swept: VolumesSwept = { volumesDeleted: [], capacitiesDeleted: [], watching: [...goneNodes.missingNow].filter((n) => !gone.has(n)).length };
  const absent = (error: unknown) => {
    if (statusOf(error) !== 404) throw error;
  };

  for (const { volume, node, claim } of decision.orphaned) {
    const name = volume.metadata!.name!;
    if (claim) {
      await tell(
        claim,
        "Warning",
        "VolumeNodeGone",
        `volume ${name} was on node ${node}, which is no longer in the cluster (reset or deleted): its data went with that node's key. This claim is Lost; delete it and its pod for a new volume (a StatefulSet makes both again)`,
      );
    }
    // Deleted, then its protection lifted: kubernetes.io/pv-protection
    // holds a bound PV until it is unbound, which nothing will do now.
    await api.core.deletePersistentVolume({ name }).catch(absent);
    const left = await api.core.readPersistentVolume({ name }).catch(absent);
    if (left && (left.metadata?.finalizers?.length ?? 0) > 0) {
      await api.core.replacePersistentVolume({ name, body: { ...left, metadata: { ...left.metadata, finalizers: [] } } }).catch((error: unknown) => {
        // 409: changed meanwhile (another controller); the next sweep looks again.
        if (statusOf(error) !== 404 && statusOf(error) !== 409) throw error;
      });
    }
    swept.volumesDeleted.push(name);
  }
  for (const name of decision.staleCapacities) {
    await api.storage.deleteNamespacedCSIStorageCapacity({ name, namespace: CAPACITY_NAMESPACE }).catch(absent);
    swept.capacitiesDeleted.push(name);
  }
  for (const { claim, message } of decision.tooLarge) await tell(claim, "Warning", "NotEnoughRoom", message);
  if (swept.volumesDeleted.length || swept.capacitiesDeleted.length)
    logger.info("volumes of nodes that are gone, and room no worker gives, removed", { volumes: swept.volumesDeleted.join(",") || "none", capacities: swept.capacitiesDeleted.join(",") || "none" });
  return swept;
}

/**
 * Which nodes are gone for good: named by a volume, absent from the
 * records now and at the look before. A node is never taken as gone on one
 * look alone, so a volume's PV is never deleted on a single reading.
 */
export class GoneNodes {
  private missing = new Set<string>();

  /** The nodes missing at the last look. */
  get missingNow(): ReadonlySet<string> {
    return this.missing;
  }

  /** `known`: every node ID in the records now. Returns those missing now and at the last look. */
  look(known: ReadonlySet<string>, named: Iterable<string>): Set<string> {
    const now = new Set([...named].filter((n) => !known.has(n)));
    const gone = new Set([...now].filter((n) => this.missing.has(n)));
    this.missing = now;
    return gone;
  }
}

/** What a controller keeps between sweeps: its clients, its event recorder, its looks at the records. */
export interface VolumesController {
  api: { core: CoreV1Api; storage: StorageV1Api };
  tell: ClaimEvent;
  goneNodes: GoneNodes;
}

/** The volumes controller's clients, as `identity` (the node core's admin). */
export async function volumesController(server: string, identity: ClientIdentity, logger: Logger): Promise<VolumesController> {
  const k8s = await import("@kubernetes/client-node");
  const configuration = clientConfiguration(k8s, server, identity);
  const core = new k8s.CoreV1Api(configuration);
  return { api: { core, storage: new k8s.StorageV1Api(configuration) }, tell: claimEvents(core, { component: "nodecore-volumes-controller" }, logger), goneNodes: new GoneNodes() };
}
