// A worker's volume provisioner: the claims the scheduler placed on this
// node become volumes in its volume store (volume_store.ts) and
// PersistentVolumes bound to them; a released volume is deleted with its
// data; a claim grown while in use has its volume marked for the kubelet's
// NodeExpandVolume (csi.ts); and the node's room is published for the
// scheduler. It runs as the node's own Kubernetes identity
// (nodecore:volumes:<node>, reconciler.ts's nodecore:volume-provisioner).
//
//   claim (StorageClass local, WaitForFirstConsumer)
//     │ the scheduler picks a node that has room (CSIStorageCapacity), and
//     │ annotates volume.kubernetes.io/selected-node; the PV controller
//     │ annotates volume.kubernetes.io/storage-provisioner
//     ▼
//   the provisioner of that node: store.create(pvc-<uid>, size) ──▶
//   PersistentVolume pvc-<uid> {csi: volumes.nodecore.local, nodeAffinity:
//   this node, claimRef: the claim}; the PV controller binds them
//     ⋮
//   claim deleted (and no pod uses it: Kubernetes' protection) ──▶ PV
//   Released ──▶ store.delete (the data goes, the room comes back) ──▶ PV
//   deleted
//
//   claim's request raised ──▶ PV capacity raised, claim status
//   NodeResizePending ──▶ the kubelet calls NodeExpandVolume ──▶ the limit
//   grows under the running pod, and the kubelet records the new capacity
//
// Every step converges when repeated: the store's create and delete are
// idempotent, a PV that exists already is taken as made, and a volume
// whose claim and PV are both gone is removed (an interrupted
// provisioning leaves no orphan).
//
// Its pace: a pass lists every claim and PersistentVolume, then waits at
// least 2 s, and then until one of them changes after those lists (a watch
// from their versions: watch_doorbell.ts), or 30 s. It listed both every
// 2 s until 2026-12-04: on a TCG controller, three workers' lists were the
// largest steady load of ours on the apiserver. Its room is written only
// when it changed, and read back only when a write is refused or a minute
// has passed.

import type { V1PersistentVolume, V1PersistentVolumeClaim } from "@kubernetes/client-node";
import { formatBytes, type Logger } from "../log/mod.ts";
import { sleep, type Runnable } from "../supervisor/mod.ts";
import { clientConfiguration, sameVersion, statusOf, type ClientIdentity } from "./api_client.ts";
import { claimEvents, EVENT_REPEAT_MS } from "./claim_events.ts";
import type { ComponentState } from "./component.ts";
import { CSI_DRIVER } from "./csi.ts";
import { STORAGE_CLASS } from "./reconciler.ts";
import { describeRoom, NoRoomError, VolumeError, type VolumeStore } from "./volume_store.ts";
import { nextChange, type WatchedCollection } from "./watch_doorbell.ts";

export const SELECTED_NODE = "volume.kubernetes.io/selected-node";
export const STORAGE_PROVISIONER = "volume.kubernetes.io/storage-provisioner";
const PROVISIONED_BY = "pv.kubernetes.io/provisioned-by";
const HOSTNAME_LABEL = "kubernetes.io/hostname";
/** Where each node's CSIStorageCapacity lives. */
export const CAPACITY_NAMESPACE = "kube-system";
/** Each node's CSIStorageCapacity is this and its node name. */
export const CAPACITY_PREFIX = "nodecore-local-";
/**
 * The provisioner's pace: a pass, then at least PROVISION_INTERVAL_MS, then
 * until a claim or a PersistentVolume changes (watch_doorbell.ts) or at
 * most PROVISION_QUIET_MS (the room it publishes drifts with what the node
 * writes; a claim without room is told again each minute). Where the
 * apiserver gives no watch, a pass every PROVISION_INTERVAL_MS, as before.
 */
export const PROVISION_INTERVAL_MS = 2_000;
export const PROVISION_QUIET_MS = 30_000;
/** How long the provisioner trusts what it last wrote of its capacity without reading it. */
const CAPACITY_TRUST_MS = 60_000;

const UNITS: Record<string, number> = { "": 1, k: 1e3, M: 1e6, G: 1e9, T: 1e12, P: 1e15, E: 1e18, Ki: 2 ** 10, Mi: 2 ** 20, Gi: 2 ** 30, Ti: 2 ** 40, Pi: 2 ** 50, Ei: 2 ** 60 };

/** A Kubernetes quantity of bytes ("64Mi", "1G", "1.5Gi", "1e9") as a whole number of bytes, rounded up; undefined if it is none. */
export function quantityBytes(quantity: string | undefined): number | undefined {
  const match = /^([0-9]+(?:\.[0-9]+)?)(?:[eE]([0-9]+))?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$/.exec(quantity?.trim() ?? "");
  if (!match) return undefined;
  const bytes = Math.ceil(Number(match[1]) * 10 ** Number(match[2] ?? 0) * UNITS[match[3] ?? ""]!);
  return Number.isSafeInteger(bytes) ? bytes : undefined;
}

/** The node a PV's affinity names (kubernetes.io/hostname), if it names one. */
export function volumeNode(pv: V1PersistentVolume): string | undefined {
  for (const term of pv.spec?.nodeAffinity?.required?.nodeSelectorTerms ?? []) {
    for (const expression of term.matchExpressions ?? []) {
      if (expression.key === HOSTNAME_LABEL && expression.operator === "In" && expression.values?.length === 1) return expression.values[0];
    }
  }
  return undefined;
}

/** Whether `claim` waits for this node's provisioner to make its volume. */
export function awaitsVolumeOn(claim: V1PersistentVolumeClaim, nodeName: string): boolean {
  const annotations = claim.metadata?.annotations ?? {};
  return (
    claim.spec?.storageClassName === STORAGE_CLASS &&
    !claim.spec.volumeName &&
    (claim.status?.phase ?? "Pending") === "Pending" &&
    annotations[SELECTED_NODE] === nodeName &&
    annotations[STORAGE_PROVISIONER] === CSI_DRIVER &&
    claim.metadata?.deletionTimestamp === undefined
  );
}

/** The PV name of a claim: what the store names its volume too. */
export const volumeNameOf = (claim: V1PersistentVolumeClaim) => `pvc-${claim.metadata!.uid}`;

/** The PersistentVolume of `claim`, made on `nodeName` with `bytes`. */
export function persistentVolumeFor(claim: V1PersistentVolumeClaim, nodeName: string, bytes: number): V1PersistentVolume {
  const name = volumeNameOf(claim);
  return {
    apiVersion: "v1",
    kind: "PersistentVolume",
    metadata: { name, annotations: { [PROVISIONED_BY]: CSI_DRIVER }, labels: { "app.kubernetes.io/managed-by": "nodecore" } },
    spec: {
      // The claim's own words (64Mi), so that listings show what the user asked for.
      capacity: { storage: claim.spec?.resources?.requests?.storage ?? String(bytes) },
      accessModes: claim.spec?.accessModes ?? ["ReadWriteOnce"],
      persistentVolumeReclaimPolicy: "Delete",
      storageClassName: STORAGE_CLASS,
      volumeMode: "Filesystem",
      claimRef: { apiVersion: "v1", kind: "PersistentVolumeClaim", namespace: claim.metadata!.namespace!, name: claim.metadata!.name!, uid: claim.metadata!.uid! },
      csi: { driver: CSI_DRIVER, volumeHandle: name },
      nodeAffinity: { required: { nodeSelectorTerms: [{ matchExpressions: [{ key: HOSTNAME_LABEL, operator: "In", values: [nodeName] }] }] } },
    },
  };
}

export interface ProvisionerOptions {
  nodeName: string;
  store: VolumeStore;
  /** The apiserver's URL, and this node's volumes identity (pki.ts volumesUser). */
  apiserver: string;
  identity: ClientIdentity;
  intervalMs?: number;
  /** The longest wait between passes while no claim or PersistentVolume changes (PROVISION_QUIET_MS). */
  quietMs?: number;
  /** The "volume-provisioner" status line. */
  report?: (component: string, state: ComponentState, message: string) => void;
}

/** The provisioner: a pass at the pace PROVISION_INTERVAL_MS says; a failed pass is logged and the next one tries again. */
export function provisionerService(options: ProvisionerOptions): Runnable {
  return async (ctx) => {
    const k8s = await import("@kubernetes/client-node");
    const configuration = clientConfiguration(k8s, options.apiserver, options.identity);
    const core = new k8s.CoreV1Api(configuration);
    const storage = new k8s.StorageV1Api(configuration);
    const tell = claimEvents(core, { component: CSI_DRIVER, host: options.nodeName }, ctx.logger);
    const recovered = options.store.recover();
    if (recovered.length) ctx.logger.info("finished what an interrupted volume operation left", { removed: recovered.join(",") });

    const provision = async (claim: V1PersistentVolumeClaim) => {
      const name = volumeNameOf(claim);
      const bytes = quantityBytes(claim.spec?.resources?.requests?.storage);
      if (claim.spec?.volumeMode === "Block") return tell(claim, "Warning", "ProvisioningFailed", "block volumes are not served by the local StorageClass; use volumeMode: Filesystem");
      if (!bytes || bytes <= 0) return tell(claim, "Warning", "ProvisioningFailed", `the claim asks for ${JSON.stringify(claim.spec?.resources?.requests?.storage ?? "")}, not a size`);
      try {
        options.store.create(name, bytes);
      } catch (error) {
        // No room, or the node cannot make volumes (its quotas): the claim says so, at most once a minute, and the pass goes on.
        const why = error instanceof NoRoomError || error instanceof VolumeError ? error.message : `could not make the volume: ${(error as Error).message}`;
        return tell(claim, "Warning", "ProvisioningFailed", `node ${options.nodeName}: ${why}`);
      }
      try {
        await core.createPersistentVolume({ body: persistentVolumeFor(claim, options.nodeName, bytes) });
      } catch (error) {
        if (statusOf(error) !== 409) throw error;
      }
      ctx.logger.info("volume provisioned", { claim: `${claim.metadata!.namespace}/${claim.metadata!.name}`, volume: name, bytes });
      await tell(claim, "Normal", "ProvisioningSucceeded", `volume ${name} of ${formatBytes(bytes)} on node ${options.nodeName}'s encrypted data partition, limited to its size`);
    };

    const expand = async (pv: V1PersistentVolume, claim: V1PersistentVolumeClaim) => {
      const wanted = quantityBytes(claim.spec?.resources?.requests?.storage) ?? 0;
      const capacity = quantityBytes(pv.spec?.capacity?.storage) ?? 0;
      if (wanted <= capacity || claim.status?.allocatedResourceStatuses?.storage) return;
      const room = options.store.room();
      if (wanted - capacity > room.availableBytes) {
        return tell(claim, "Warning", "VolumeResizeFailed", `node ${options.nodeName}: ${formatBytes(wanted - capacity)} more asked; ${describeRoom(room)}`);
      }
      // The kubelet grows the limit (NodeExpandVolume) when the PV is larger than the claim's status says, and the claim waits for it.
      const size = claim.spec!.resources!.requests!.storage!;
      await core.replacePersistentVolume({ name: pv.metadata!.name!, body: { ...pv, spec: { ...pv.spec, capacity: { ...pv.spec!.capacity, storage: size } } } });
      await core.replaceNamespacedPersistentVolumeClaimStatus({
        name: claim.metadata!.name!,
        namespace: claim.metadata!.namespace!,
        body: { ...claim, status: { ...claim.status, allocatedResources: { ...claim.status?.allocatedResources, storage: size }, allocatedResourceStatuses: { storage: "NodeResizePending" } } },
      });
      ctx.logger.info("volume expansion handed to the kubelet", { volume: pv.metadata!.name, bytes: wanted });
      await tell(claim, "Normal", "ExternalExpanding", `volume ${pv.metadata!.name} grows to ${formatBytes(wanted)} on node ${options.nodeName} while in use (the kubelet raises its limit)`);
    };

    // The capacity last written, its version, and when it was read or
    // written: trusted for CAPACITY_TRUST_MS (then read again, so that an
    // object deleted by someone else comes back); a write it refuses makes
    // the next pass read it.
    let published: { capacity: string; metadata: { resourceVersion: string | undefined }; at: number } | undefined;
    const publishCapacity = async (available: number) => {
      const name = `${CAPACITY_PREFIX}${options.nodeName}`.slice(0, 253);
      const body = {
        apiVersion: "storage.k8s.io/v1",
        kind: "CSIStorageCapacity",
        metadata: { name, namespace: CAPACITY_NAMESPACE, labels: { "app.kubernetes.io/managed-by": "nodecore" } },
        storageClassName: STORAGE_CLASS,
        nodeTopology: { matchLabels: { [HOSTNAME_LABEL]: options.nodeName } },
        capacity: String(available),
        maximumVolumeSize: String(available),
      };
      const known = published && Date.now() - published.at < CAPACITY_TRUST_MS ? published : undefined;
      if (known?.capacity === body.capacity) return;
      published = undefined;
      const existing =
        known ??
        (await storage.readNamespacedCSIStorageCapacity({ name, namespace: CAPACITY_NAMESPACE }).catch((error: unknown) => {
          if (statusOf(error) === 404) return undefined;
          throw error;
        }));
      const written = !existing
        ? await storage.createNamespacedCSIStorageCapacity({ namespace: CAPACITY_NAMESPACE, body })
        : existing.capacity !== body.capacity
          ? await storage.replaceNamespacedCSIStorageCapacity({ name, namespace: CAPACITY_NAMESPACE, body: { ...body, metadata: { ...body.metadata, ...sameVersion(existing.metadata) } } })
          : existing;
      published = { capacity: body.capacity, metadata: { resourceVersion: written.metadata?.resourceVersion }, at: Date.now() };
    };

    /** Returns the lists' versions, which the doorbell watches from. */
    const pass = async (): Promise<WatchedCollection[]> => {
      const [claims, volumes] = await Promise.all([core.listPersistentVolumeClaimForAllNamespaces(), core.listPersistentVolume()]);
      const ours = volumes.items.filter((pv) => pv.spec?.csi?.driver === CSI_DRIVER && volumeNode(pv) === options.nodeName);
      const made = new Set<string>();
      for (const claim of claims.items) {
        if (!awaitsVolumeOn(claim, options.nodeName)) continue;
        made.add(volumeNameOf(claim));
        await provision(claim);
      }
      for (const pv of ours) {
        const name = pv.metadata!.name!;
        if (pv.status?.phase === "Released" && pv.spec?.persistentVolumeReclaimPolicy === "Delete") {
          options.store.delete(pv.spec.csi!.volumeHandle);
          await core.deletePersistentVolume({ name }).catch((error: unknown) => {
            if (statusOf(error) !== 404) throw error;
          });
          ctx.logger.info("volume deleted with its claim; its room is back", { volume: name });
          continue;
        }
        const claim = claims.items.find((c) => c.metadata?.uid === pv.spec?.claimRef?.uid);
        if (claim && pv.status?.phase === "Bound") await expand(pv, claim);
      }
      // A volume no PV names and no waiting claim will name: what an interrupted provisioning left.
      // Any PV of this driver counts, whatever its affinity says: data is never removed on a PV's word being unclear.
      const named = new Set(volumes.items.filter((pv) => pv.spec?.csi?.driver === CSI_DRIVER).map((pv) => pv.spec!.csi!.volumeHandle));
      const kept = options.store.list().filter((volume) => {
        if (named.has(volume.name) || made.has(volume.name)) return true;
        options.store.delete(volume.name);
        ctx.logger.info("removed a volume that no claim or PersistentVolume names", { volume: volume.name });
        return false;
      });
      await publishCapacity(options.store.room(kept).availableBytes);
      // A list without a version makes the doorbell say "failed", and the next pass comes at the old pace.
      return [
        { path: "/api/v1/persistentvolumeclaims", resourceVersion: claims.metadata?.resourceVersion ?? "" },
        { path: "/api/v1/persistentvolumes", resourceVersion: volumes.metadata?.resourceVersion ?? "" },
      ];
    };

    let healthy = false;
    let quietUntil = 0;
    for (;;) {
      let watched: WatchedCollection[] = [];
      try {
        watched = await pass();
        if (!healthy) {
          ctx.signalHealthy();
          options.report?.("volume-provisioner", "running", `provisioning the claims placed on this node; ${describeRoom(options.store.room())}`);
        }
        healthy = true;
        quietUntil = 0;
      } catch (error) {
        // Said once a minute while it lasts (an apiserver away), not at every pass.
        if (Date.now() >= quietUntil) {
          logPassFailure(ctx.logger, error);
          options.report?.("volume-provisioner", "waiting", `a pass failed, trying again: ${(error as Error).message.slice(0, 200)}`);
        }
        quietUntil = Date.now() + EVENT_REPEAT_MS;
        healthy = false;
      }
      await sleep(options.intervalMs ?? PROVISION_INTERVAL_MS, ctx.signal);
      // After a failed pass nothing is watched: the next pass comes at the old pace.
      if (watched.length > 0) await nextChange(options.apiserver, options.identity, watched, options.quietMs ?? PROVISION_QUIET_MS, ctx.signal);
    }
  };
}

function logPassFailure(logger: Logger, error: unknown): void {
  const status = statusOf(error);
  logger.warn("a provisioning pass failed; the next one tries again", { error: (error as Error).message.slice(0, 300), ...(status !== undefined ? { status } : {}) });
}
