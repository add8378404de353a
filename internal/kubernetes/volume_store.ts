// A worker's persistent volumes: one directory per volume on the encrypted
// data partition, with a project quota at the claim's size, so that a
// volume's data is encrypted at rest with the node's key, and one volume
// can never fill the partition that etcd and containerd live on.
//
//   <data>/volumes/<name>/            a volume: project <id>, hard limit
//   <data>/volumes/.new-<name>/       being made: project and limit first,
//                                     renamed into place last
//   <data>/volumes/.deleting-<name>/  being deleted: renamed first, removed,
//                                     its limit cleared last
//
// Every step is one the next start finishes or undoes (recover): a volume
// exists whole under its name or not at all, and nothing half-made stays.
//
// Room: a volume's whole limit counts as taken from the moment it is made
// (no oversubscription), and a reserve (VOLUME_RESERVE) is never given to
// volumes, so that etcd, containerd's images and the node's own files
// always keep room. capacity() is what the scheduler is told
// (CSIStorageCapacity).

import { mkdirSync, readdirSync, renameSync, rmSync, existsSync } from "node:fs";
import { join } from "node:path";
import { assignProject, clearProjectLimit, freeSpace, projectOf, projectUsage, QUOTA_CHECK_PROJECT, setProjectLimit, MAX_PROJECT_ID } from "../localstorage/mod.ts";
import { formatBytes } from "../log/mod.ts";

/**
 * What volumes never take: the larger of a share of the partition and a
 * floor. The share is above the kubelet's own line (it evicts pods when
 * less than 10% of the node's file system is free, and collects images
 * from 85% full), so that volumes filled to their limits never make the
 * kubelet evict the pods using them; the floor keeps room for etcd and
 * the node's files on a small disk.
 */
export const VOLUME_RESERVE = { share: 0.15, floorBytes: 256 * 1024 * 1024 } as const;
/** A volume's name: what the provisioner names it (its PV's name, pvc-<uid>). */
export const VOLUME_NAME = /^[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?$/;
const MAKING = ".new-";
const DELETING = ".deleting-";

export class VolumeError extends Error {
  override name = "VolumeError";
}

/** No room for a volume: names the node's room, for the claim's event. */
export class NoRoomError extends VolumeError {
  override name = "NoRoomError";
}

/** The kernel's quotas, as the store uses them (quota.ts on a node; a recording stand-in in unit tests on a host whose kernel has none). */
export interface ProjectQuotas {
  projectOf(dir: string): number;
  assign(dir: string, id: number): void;
  setLimit(id: number, bytes: number): void;
  usage(id: number): { usedBytes: number; limitBytes: number; usedInodes: number };
  clear(id: number): void;
}

/** The kernel's project quotas on the file system at `mountpoint`. */
export function kernelQuotas(mountpoint: string): ProjectQuotas {
  return {
    projectOf: (dir) => projectOf(dir).id,
    assign: (dir, id) => assignProject(dir, id),
    setLimit: (id, bytes) => setProjectLimit(mountpoint, id, bytes),
    usage: (id) => projectUsage(mountpoint, id),
    clear: (id) => clearProjectLimit(mountpoint, id),
  };
}

export interface Volume {
  name: string;
  path: string;
  project: number;
  limitBytes: number;
  usedBytes: number;
  usedInodes: number;
}

export interface VolumeRoom {
  /** The partition's free bytes (statfs). */
  freeBytes: number;
  totalBytes: number;
  /** What volumes never take. */
  reserveBytes: number;
  /** Limits not yet used: room promised to volumes already made. */
  promisedBytes: number;
  /** What a new volume may have: free, less the reserve and what is promised. */
  availableBytes: number;
}

/** "3.1 GiB of 9.0 GiB free; 1.0 GiB reserved for the node, 512 MiB promised to volumes: 1.6 GiB for new volumes". */
export function describeRoom(room: VolumeRoom): string {
  return `${formatBytes(room.freeBytes)} of ${formatBytes(room.totalBytes)} free; ${formatBytes(room.reserveBytes)} reserved for the node, ${formatBytes(room.promisedBytes)} promised to volumes: ${formatBytes(room.availableBytes)} for new volumes`;
}

export class VolumeStore {
  constructor(
    /** <data>/volumes. */
    readonly root: string,
    private readonly quotas: ProjectQuotas,
  ) {}

  private checkName(name: string): void {
    if (!VOLUME_NAME.test(name)) throw new VolumeError(`volume name ${JSON.stringify(name.slice(0, 80))} is not a DNS label (lower case, digits and '-', at most 63)`);
  }

  pathOf(name: string): string {
    this.checkName(name);
    return join(this.root, name);
  }

  /**
   * Finishes or undoes what an interrupted make or delete left: a
   * half-made volume is removed (its claim is provisioned again), a
   * half-deleted one is removed whole. Returns what it removed.
   */
  recover(): string[] {
    mkdirSync(this.root, { recursive: true, mode: 0o711 });
    const removed: string[] = [];
    for (const entry of readdirSync(this.root)) {
      if (!entry.startsWith(MAKING) && !entry.startsWith(DELETING)) continue;
      this.removeDir(join(this.root, entry));
      removed.push(entry);
    }
    return removed;
  }

  private removeDir(dir: string): void {
    let project = 0;
    try {
      project = this.quotas.projectOf(dir);
    } catch {
      // Gone already, or never given one.
    }
    rmSync(dir, { recursive: true, force: true });
    if (project > QUOTA_CHECK_PROJECT) this.quotas.clear(project);
  }

  /** The volumes, with their use. */
  list(): Volume[] {
    if (!existsSync(this.root)) return [];
    return readdirSync(this.root)
      .filter((entry) => !entry.startsWith("."))
      .flatMap((name) => {
        const volume = this.get(name);
        return volume ? [volume] : [];
      });
  }

  /** One volume, or undefined if there is none of that name. */
  get(name: string): Volume | undefined {
    const path = this.pathOf(name);
    if (!existsSync(path)) return undefined;
    const project = this.quotas.projectOf(path);
    const usage = this.quotas.usage(project);
    return { name, path, project, limitBytes: usage.limitBytes, usedBytes: usage.usedBytes, usedInodes: usage.usedInodes };
  }

  /** The partition's room for volumes; `volumes`: list()'s answer, when the caller has it already. */
  room(volumes: readonly Volume[] = this.list()): VolumeRoom {
    const space = freeSpace(this.root);
    const reserveBytes = Math.max(VOLUME_RESERVE.floorBytes, Math.floor(space.totalBytes * VOLUME_RESERVE.share));
    const promisedBytes = volumes.reduce((sum, v) => sum + Math.max(0, v.limitBytes - v.usedBytes), 0);
    const availableBytes = Math.max(0, space.freeBytes - reserveBytes - promisedBytes);
    return { freeBytes: space.freeBytes, totalBytes: space.totalBytes, reserveBytes, promisedBytes, availableBytes };
  }

  private nextProject(volumes: readonly Volume[]): number {
    const used = new Set(volumes.map((v) => v.project));
    for (let id = QUOTA_CHECK_PROJECT + 1; id <= MAX_PROJECT_ID; id++) if (!used.has(id)) return id;
    throw new VolumeError("no project ID left");
  }

  /**
   * Makes volume `name` with a hard limit of `bytes`; a volume of that name
   * already there is returned as it is (a provisioner that died after
   * making it makes it again). NoRoomError when it does not fit.
   */
  create(name: string, bytes: number): Volume {
    const path = this.pathOf(name);
    const existing = this.get(name);
    if (existing) return existing;
    if (!Number.isSafeInteger(bytes) || bytes <= 0) throw new VolumeError(`a volume of ${bytes} bytes`);
    const volumes = this.list();
    const room = this.room(volumes);
    if (bytes > room.availableBytes) throw new NoRoomError(`${formatBytes(bytes)} asked; ${describeRoom(room)}`);
    const making = join(this.root, `${MAKING}${name}`);
    rmSync(making, { recursive: true, force: true });
    mkdirSync(making, { mode: 0o777 });
    const project = this.nextProject(volumes);
    this.quotas.assign(making, project);
    this.quotas.setLimit(project, bytes);
    renameSync(making, path);
    return this.get(name)!;
  }

  /** Raises volume `name`'s limit to `bytes` (never lowers it); at once, while pods write. */
  expand(name: string, bytes: number): Volume {
    const volume = this.get(name);
    if (!volume) throw new VolumeError(`no volume ${name} on this node`);
    if (bytes <= volume.limitBytes) return volume;
    const room = this.room();
    if (bytes - volume.limitBytes > room.availableBytes) throw new NoRoomError(`${formatBytes(bytes - volume.limitBytes)} more asked for ${name}; ${describeRoom(room)}`);
    this.quotas.setLimit(volume.project, bytes);
    return this.get(name)!;
  }

  /** Deletes volume `name` and its data, and gives its room back; nothing if there is none. */
  delete(name: string): void {
    const path = this.pathOf(name);
    if (!existsSync(path)) return;
    const deleting = join(this.root, `${DELETING}${name}`);
    rmSync(deleting, { recursive: true, force: true });
    renameSync(path, deleting);
    this.removeDir(deleting);
  }
}
