// The node's volume plugin: CSI's Identity and Node services for the
// kubelet, over unix sockets in the kubelet's directory, serving the
// volumes of this node's volume store (volume_store.ts).
//
//   kubelet ── watches <root>/plugins_registry/ ──▶ volumes.nodecore.local-reg.sock
//        pluginregistration.Registration: GetInfo → {CSIPlugin, name, endpoint}
//   kubelet ── <root>/plugins/volumes.nodecore.local/csi.sock ──▶ csiNodeService
//        NodePublishVolume    bind-mounts <data>/volumes/<pv> on the pod's
//                             target path (read-only when asked)
//        NodeUnpublishVolume  unmounts it
//        NodeGetVolumeStats   the project quota's use and limit: the
//                             kubelet's kubelet_volume_stats_* metrics
//        NodeExpandVolume     raises the limit, while the pod writes
//
// Both sockets are local services (internal/rpc listenLocal): 0600, and
// only processes on the node reach them. Every request is checked before
// anything is mounted: the volume must be one of this node's, the target
// a path below the kubelet's pods directory, the access mode one node's.
// Block volumes are not served (INVALID_ARGUMENT says so).

import { existsSync, mkdirSync, rmdirSync, statfsSync } from "node:fs";
import { join, normalize } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import {
  Identity,
  Node as CsiNode,
  NodeServiceCapability_RPC_Type,
  PluginCapability_VolumeExpansion_Type,
  VolumeCapability_AccessMode_Mode,
  VolumeUsage_Unit,
  type NodeGetVolumeStatsResponseSchema,
  type VolumeCapability,
} from "../../proto/gen/csi/csi_pb.ts";
import { Registration } from "../../proto/gen/csi/pluginregistration_pb.ts";
import { FailedPreconditionError, InvalidArgumentError, NotFoundError, quote, ResourceExhaustedError, type ServiceImpl } from "../rpc/mod.ts";
import { mountAt } from "../localstorage/mod.ts";
import { MS_BIND, MS_RDONLY, MS_REMOUNT, mount, umount } from "../sys/mod.ts";
import { VERSION } from "../version/mod.ts";
import { NoRoomError, VOLUME_NAME, type VolumeStore } from "./volume_store.ts";

/** The CSI driver's name: PersistentVolumes, the CSIDriver object and the StorageClass name it. */
export const CSI_DRIVER = "volumes.nodecore.local";
/** The CSI versions the plugin speaks, as the kubelet's registration asks. */
export const CSI_VERSIONS = ["1.0.0"] as const;

/** Where the plugin's sockets go below the kubelet's root directory. */
export function csiSockets(kubeletRoot: string): { registration: string; endpoint: string; podsDir: string } {
  return {
    registration: join(kubeletRoot, "plugins_registry", `${CSI_DRIVER}-reg.sock`),
    endpoint: join(kubeletRoot, "plugins", CSI_DRIVER, "csi.sock"),
    podsDir: join(kubeletRoot, "pods"),
  };
}

const SINGLE_NODE_MODES: ReadonlySet<VolumeCapability_AccessMode_Mode> = new Set([
  VolumeCapability_AccessMode_Mode.SINGLE_NODE_WRITER,
  VolumeCapability_AccessMode_Mode.SINGLE_NODE_READER_ONLY,
  VolumeCapability_AccessMode_Mode.SINGLE_NODE_SINGLE_WRITER,
  VolumeCapability_AccessMode_Mode.SINGLE_NODE_MULTI_WRITER,
]);

function volumeName(id: string): string {
  if (!VOLUME_NAME.test(id)) throw new InvalidArgumentError(`volume_id: ${quote(id, 80)} is not a volume of this plugin (a DNS label)`);
  return id;
}

/** `path` normalised, if it lies strictly below `dir`; else INVALID_ARGUMENT naming `field`. */
function below(dir: string, path: string, field: string): string {
  const normal = normalize(path);
  if (!path.startsWith("/") || normal !== path.replace(/\/+$/, "") || !normal.startsWith(`${dir}/`)) {
    throw new InvalidArgumentError(`${field}: ${quote(path, 200)} is not a path below the kubelet's ${dir}`);
  }
  return normal;
}

function checkCapability(capability: VolumeCapability | undefined, readonly: boolean): void {
  if (!capability) throw new InvalidArgumentError("volume_capability: missing");
  if (capability.accessType.case === "block") throw new InvalidArgumentError("volume_capability: block volumes are not served by this plugin; use volumeMode: Filesystem");
  if (capability.accessType.case !== "mount") throw new InvalidArgumentError("volume_capability: neither mount nor block");
  const mode = capability.accessMode?.mode ?? VolumeCapability_AccessMode_Mode.UNKNOWN;
  if (!SINGLE_NODE_MODES.has(mode))
    throw new InvalidArgumentError(`volume_capability.access_mode: ${VolumeCapability_AccessMode_Mode[mode] ?? mode}: a volume lives on one node (ReadWriteOnce, ReadWriteOncePod)`);
  if (mode === VolumeCapability_AccessMode_Mode.SINGLE_NODE_READER_ONLY && !readonly) throw new InvalidArgumentError("readonly: a reader-only access mode is published read-only");
}

export interface CsiOptions {
  store: VolumeStore;
  /** The kubelet's pods directory: targets lie below it. */
  podsDir: string;
  /** The Kubernetes node's name (NodeGetInfo). */
  nodeName: string;
}

type StatsResponse = MessageInitShape<typeof NodeGetVolumeStatsResponseSchema>;

/** CSI Identity. */
export function csiIdentityService(): ServiceImpl<typeof Identity> {
  return {
    async getPluginInfo() {
      return { name: CSI_DRIVER, vendorVersion: VERSION };
    },
    async getPluginCapabilities() {
      return { capabilities: [{ type: { case: "volumeExpansion", value: { type: PluginCapability_VolumeExpansion_Type.ONLINE } } }] };
    },
    async probe() {
      return { ready: true };
    },
  };
}

/** CSI Node: this node's volumes, mounted into its pods. */
export function csiNodeService(options: CsiOptions): ServiceImpl<typeof CsiNode> {
  const { store } = options;
  const existing = (id: string) => {
    const volume = store.get(volumeName(id));
    if (!volume) throw new NotFoundError(`volume ${id} is not on this node`);
    return volume;
  };
  return {
    async nodeGetInfo() {
      return { nodeId: options.nodeName };
    },
    async nodeGetCapabilities() {
      return {
        capabilities: [NodeServiceCapability_RPC_Type.GET_VOLUME_STATS, NodeServiceCapability_RPC_Type.EXPAND_VOLUME].map((type) => ({ type: { case: "rpc" as const, value: { type } } })),
      };
    },
    async nodePublishVolume(request) {
      const volume = existing(request.volumeId);
      const target = below(options.podsDir, request.targetPath, "target_path");
      checkCapability(request.volumeCapability, request.readonly);
      const mounted = mountAt(target);
      if (mounted) {
        const readonly = mounted.options.includes("ro");
        if (readonly !== request.readonly) throw new FailedPreconditionError(`${target} is already mounted ${readonly ? "read-only" : "read-write"}`);
        return {};
      }
      mkdirSync(target, { recursive: true, mode: 0o750 });
      mount(volume.path, target, "", MS_BIND);
      if (request.readonly) mount(volume.path, target, "", MS_BIND | MS_REMOUNT | MS_RDONLY);
      return {};
    },
    async nodeUnpublishVolume(request) {
      volumeName(request.volumeId);
      const target = below(options.podsDir, request.targetPath, "target_path");
      if (mountAt(target)) umount(target);
      if (existsSync(target)) rmdirSync(target);
      return {};
    },
    async nodeGetVolumeStats(request): Promise<StatsResponse> {
      const volume = existing(request.volumeId);
      below(options.podsDir, request.volumePath, "volume_path");
      const inodes = statfsSync(volume.path);
      const total = volume.limitBytes;
      return {
        usage: [
          { unit: VolumeUsage_Unit.BYTES, total: BigInt(total), used: BigInt(volume.usedBytes), available: BigInt(Math.max(0, total - volume.usedBytes)) },
          { unit: VolumeUsage_Unit.INODES, total: BigInt(inodes.files), used: BigInt(volume.usedInodes), available: BigInt(inodes.ffree) },
        ],
      };
    },
    async nodeExpandVolume(request) {
      const name = existing(request.volumeId).name;
      const bytes = Number(request.capacityRange?.requiredBytes ?? 0n);
      if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new InvalidArgumentError("capacity_range.required_bytes: a positive size is needed");
      try {
        return { capacityBytes: BigInt(store.expand(name, bytes).limitBytes) };
      } catch (err) {
        if (err instanceof NoRoomError) throw new ResourceExhaustedError(err.message);
        throw err;
      }
    },
  };
}

/** The kubelet's plugin registration: who the plugin is and where its CSI socket is. */
export function csiRegistrationService(endpoint: string, told: (registered: boolean, error: string) => void): ServiceImpl<typeof Registration> {
  return {
    async getInfo() {
      return { type: "CSIPlugin", name: CSI_DRIVER, endpoint, supportedVersions: [...CSI_VERSIONS] };
    },
    async notifyRegistrationStatus(request) {
      told(request.pluginRegistered, request.error);
      return {};
    },
  };
}
