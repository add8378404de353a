// The curator's state in etcd: key layout, typed reads and compare-and-swap
// writes. Every write is an etcd transaction, so concurrent curators (and a
// leader that lost its lease mid-write) can never overwrite each other.
//
// Writes are fenced on leadership: when the store has a fence (the
// server's), each transaction also requires the leader's campaign key to
// exist. That key lives exactly as long as the term's lease, so a curator
// that lost its lease, however slow to notice, cannot write: its
// transaction fails and the caller gets UNAVAILABLE.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ClientClosedError, ClientRuntimeError, EtcdError, GRPCGenericError, type ComparatorBuilder, type Namespace } from "etcd3";
import { X509Certificate } from "node:crypto";
import { ClusterNetworkingSchema, type ContainerRegistry, type Manifest } from "../../proto/gen/common/common_pb.ts";
import { BackupScheduleSchema, BackupStatusSchema, type BackupSchedule, type BackupStatus } from "../../proto/gen/api/management_pb.ts";
import {
  CertificateAuthoritySchema,
  ClusterRecordSchema,
  ContainerRegistriesRecordSchema,
  ManifestsRecordSchema,
  NodeRecordSchema,
  type ClusterRecord,
  type NodeRecord,
} from "../../proto/gen/curator/state/state_pb.ts";
import { privateKeyFromRaw, rawPrivateKey, type CA } from "../pki/mod.ts";
import { AbortedError, AlreadyExistsError, NotFoundError, ResourceExhaustedError, UnavailableError } from "../rpc/mod.ts";

/** All curator keys live under this etcd prefix. */
export const ETCD_PREFIX = "/nodecore/";
export const CLUSTER_KEY = "cluster";
export const CA_KEYS = { cluster: "ca/cluster", etcd: "ca/etcd" } as const;
export const NODES_PREFIX = "nodes/";
/** joinkeys/<hex of a join public key> → the node ID it belongs to: one node per join key. */
export const JOIN_KEYS_PREFIX = "joinkeys/";
/**
 * deleted/<node id> → the record the node had when the owner deleted it:
 * its tombstone. A node with one cannot register again (with its node key),
 * nor can another node register with its join key
 * (deleted-joinkeys/<hex> → the node ID), until the owner lifts it.
 */
export const DELETED_PREFIX = "deleted/";
export const DELETED_JOIN_KEYS_PREFIX = "deleted-joinkeys/";
/** wireguardkeys/<hex of a WireGuard public key> → the node ID whose key it is: one node per key. */
export const WIREGUARD_KEYS_PREFIX = "wireguardkeys/";
/** podprefixes/<prefix, "/" written "_"> → the node ID holding that pod prefix (pod_prefixes.ts). */
export const POD_PREFIXES_PREFIX = "podprefixes/";
/** The scheduled backups as the owner set them (api BackupSchedule). */
export const BACKUP_SCHEDULE_KEY = "settings/backups";
/** What the node that takes the scheduled backups last reported (api BackupStatus); written by that node (internal/roleserve/worker_backups.ts). */
export const BACKUP_STATUS_KEY = "backups/status";
/** How workers pull images, per registry host (state ContainerRegistriesRecord; registries.ts). */
export const REGISTRIES_KEY = "settings/registries";
/** The registry configuration's largest encoding: well under etcd's 1.5 MiB request bound. */
export const MAX_REGISTRIES_RECORD_BYTES = 1024 * 1024;
/** The owner's add-on manifests (ManifestsRecord): bounded by MAX_MANIFESTS_RECORD_BYTES (kubernetes/manifests.ts). */
export const MANIFESTS_KEY = "settings/manifests";

export function wireguardKeyIndex(key: Uint8Array): string {
  return WIREGUARD_KEYS_PREFIX + Buffer.from(key).toString("hex");
}

export function podPrefixKey(prefix: string): string {
  return POD_PREFIXES_PREFIX + prefix.replace("/", "_");
}
/** A compare-and-swap that keeps losing gives up after this many attempts. */
const MAX_UPDATE_ATTEMPTS = 20;

/**
 * An etcd client error as callers of the curator see it: etcd did not
 * answer as it should (timeouts, lost connections, a member that is
 * starting), which is UNAVAILABLE, never INTERNAL. Anything else passes.
 */
export function etcdUnavailable(err: unknown): unknown {
  if (err instanceof GRPCGenericError || err instanceof ClientRuntimeError || err instanceof ClientClosedError || err instanceof EtcdError) {
    return new UnavailableError(`etcd did not answer: ${err.message}; try again`, { cause: err });
  }
  return err;
}

export class StoreError extends Error {
  override name = "StoreError";
}

export type CAKind = keyof typeof CA_KEYS;

export interface Versioned<T> {
  value: T;
  /** The etcd mod revision of the key. */
  modRevision: string;
}

/** A write refused because this curator does not (or no longer) lead. */
export class FencedError extends UnavailableError {
  override name = "FencedError";
}

export interface StoreOptions {
  /**
   * The leader's campaign key while this curator leads (Leadership.fenceKey),
   * undefined otherwise. Without this option writes are not fenced (tests
   * that write state directly, bootstrap).
   */
  fence?: () => string | undefined;
}

export class CuratorStore {
  readonly etcd: Namespace;
  /** The last queued write of each node record (oneAtATime). */
  private readonly recordQueues = new Map<string, Promise<void>>();

  constructor(
    etcd: Namespace,
    private readonly options: StoreOptions = {},
  ) {
    this.etcd = etcd;
  }

  /**
   * Commits `txn` (its comparisons and operations set) with the fence added
   * to its comparisons; returns whether it succeeded. FencedError when
   * fenced and not leading (nothing sent), or when the transaction failed
   * and the fence is gone: the term ended. That error cannot say the write
   * was not made: this attempt failed, but the etcd client retries a call
   * whose answer was lost, so an earlier attempt may have been applied.
   */
  private async commitFenced(txn: ComparatorBuilder): Promise<boolean> {
    const fence = this.options.fence ? this.options.fence() : undefined;
    if (this.options.fence && !fence) throw new FencedError("this curator is not the leader; the write was not made");
    if (fence !== undefined) txn.and(fence, "Version", ">", 0);
    const result = await txn.commit();
    if (result.succeeded) return true;
    if (fence !== undefined && (await this.etcd.get(fence).exec()).kvs.length === 0) {
      throw new FencedError("this curator's term as leader ended during the write; whether the write was made is not known");
    }
    return false;
  }

  /**
   * Runs the read-modify-writes of one node record one after another. While
   * leading, this curator is the record's only writer (writes are fenced),
   * so its own calls queue here rather than race each other through etcd:
   * racing, each lost compare-and-swap costs two more round trips, and under
   * load (the owner's retries, status pushes) the losers' retries grew until
   * the leader missed its lease keepalives (qemu fault run, seed 11).
   */
  private oneAtATime<T>(id: string, work: () => Promise<T>): Promise<T> {
    const previous = this.recordQueues.get(id) ?? Promise.resolve();
    const result = previous.then(work);
    const tail = result.then(
      () => {},
      () => {},
    );
    this.recordQueues.set(id, tail);
    void tail.then(() => {
      if (this.recordQueues.get(id) === tail) this.recordQueues.delete(id);
    });
    return result;
  }

  async cluster(): Promise<ClusterRecord | undefined> {
    const bytes = await this.etcd.get(CLUSTER_KEY).buffer();
    return bytes ? fromBinary(ClusterRecordSchema, bytes) : undefined;
  }

  async ca(kind: CAKind): Promise<CA> {
    const bytes = await this.etcd.get(CA_KEYS[kind]).buffer();
    if (!bytes) throw missingCA(kind);
    return decodeCA(bytes);
  }

  async node(id: string): Promise<Versioned<NodeRecord> | undefined> {
    const response = await this.etcd.get(NODES_PREFIX + id).exec();
    const kv = response.kvs[0];
    if (!kv) return undefined;
    return { value: fromBinary(NodeRecordSchema, kv.value), modRevision: kv.mod_revision };
  }

  /** Every node record, and the etcd revision they were read at (for watches to start after). */
  async nodes(): Promise<{ nodes: NodeRecord[]; revision: string }> {
    const response = await this.etcd.getAll().prefix(NODES_PREFIX).exec();
    return { nodes: response.kvs.map((kv) => fromBinary(NodeRecordSchema, kv.value)), revision: response.header.revision };
  }

  /** The node whose join key this is, if any. */
  async nodeByJoinKey(joinKey: Uint8Array): Promise<NodeRecord | undefined> {
    const id = await this.nodeIdByJoinKey(joinKey);
    if (id === undefined) return undefined;
    const node = await this.node(id);
    // The index and the record are written together; check anyway.
    return node && Buffer.from(node.value.joinKey).equals(Buffer.from(joinKey)) ? node.value : undefined;
  }

  /** The ID of the node that holds this join key, if any. */
  async nodeIdByJoinKey(joinKey: Uint8Array): Promise<string | undefined> {
    return (await this.etcd.get(joinKeyIndex(joinKey)).string()) ?? undefined;
  }

  /**
   * Creates a node record and claims its join key, both or neither:
   * "created", or which of the two is taken already.
   */
  async createNode(record: NodeRecord): Promise<"created" | "node-exists" | "join-key-in-use" | "node-deleted" | "join-key-deleted"> {
    const key = NODES_PREFIX + record.id;
    const index = joinKeyIndex(record.joinKey);
    const created = await this.commitFenced(
      this.etcd
        .if(key, "Create", "==", 0)
        .and(index, "Create", "==", 0)
        .and(DELETED_PREFIX + record.id, "Create", "==", 0)
        .and(deletedJoinKeyIndex(record.joinKey), "Create", "==", 0)
        .then(this.etcd.put(key).value(Buffer.from(toBinary(NodeRecordSchema, record))), this.etcd.put(index).value(record.id)),
    );
    if (created) return "created";
    if (await this.node(record.id)) return "node-exists";
    if (await this.deletedNode(record.id)) return "node-deleted";
    if (await this.deletedNodeByJoinKey(record.joinKey)) return "join-key-deleted";
    return "join-key-in-use";
  }

  async backupSchedule(): Promise<BackupSchedule | undefined> {
    const bytes = await this.etcd.get(BACKUP_SCHEDULE_KEY).buffer();
    return bytes ? fromBinary(BackupScheduleSchema, bytes) : undefined;
  }

  async setBackupSchedule(schedule: BackupSchedule): Promise<void> {
    await this.commitFenced(this.etcd.if(BACKUP_SCHEDULE_KEY, "Version", ">", -1).then(this.etcd.put(BACKUP_SCHEDULE_KEY).value(Buffer.from(toBinary(BackupScheduleSchema, schedule)))));
  }

  /** The registry configuration, and the revision to compare-and-swap on ("0": never set). */
  async registries(): Promise<Versioned<ContainerRegistry[]>> {
    const kv = (await this.etcd.get(REGISTRIES_KEY).exec()).kvs[0];
    return kv ? { value: decodeRegistries(kv.value), modRevision: kv.mod_revision } : { value: [], modRevision: "0" };
  }

  /**
   * Read-modify-write of the registry configuration, fenced: `change` gets
   * the current entries and returns the new ones (or throws to refuse);
   * stored sorted by host. Retries on conflicts.
   */
  async updateRegistries(change: (registries: ContainerRegistry[]) => ContainerRegistry[], signal?: AbortSignal): Promise<ContainerRegistry[]> {
    return this.updateList(
      {
        key: REGISTRIES_KEY,
        what: "the registry configuration",
        read: () => this.registries(),
        order: (r) => r.host,
        encode: (registries) => toBinary(ContainerRegistriesRecordSchema, create(ContainerRegistriesRecordSchema, { registries })),
        maxBytes: MAX_REGISTRIES_RECORD_BYTES,
        smaller: "use smaller CA bundles or fewer entries",
      },
      change,
      signal,
    );
  }

  /** The owner's add-on manifests, and the revision to compare-and-swap on ("0": never set). */
  async manifests(): Promise<Versioned<Manifest[]>> {
    const kv = (await this.etcd.get(MANIFESTS_KEY).exec()).kvs[0];
    return kv ? { value: decodeManifests(kv.value), modRevision: kv.mod_revision } : { value: [], modRevision: "0" };
  }

  /** Read-modify-write of the add-on manifests, fenced, as updateRegistries; stored sorted by name. */
  async updateManifests(change: (manifests: Manifest[]) => Manifest[], maxBytes: number, signal?: AbortSignal): Promise<Manifest[]> {
    return this.updateList(
      {
        key: MANIFESTS_KEY,
        what: "the add-on manifests",
        read: () => this.manifests(),
        order: (m) => m.name,
        encode: (manifests) => toBinary(ManifestsRecordSchema, create(ManifestsRecordSchema, { manifests })),
        maxBytes,
        smaller: "delete a manifest or make them smaller",
      },
      change,
      signal,
    );
  }

  /** One list kept under one key: read, changed, sorted, bounded, and written only if nobody wrote in between. */
  private async updateList<T>(
    list: { key: string; what: string; read: () => Promise<Versioned<T[]>>; order: (item: T) => string; encode: (items: T[]) => Uint8Array; maxBytes: number; smaller: string },
    change: (items: T[]) => T[],
    signal?: AbortSignal,
  ): Promise<T[]> {
    return this.oneAtATime(list.key, async () => {
      for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
        signal?.throwIfAborted();
        const current = await list.read();
        const next = change(current.value).sort((a, b) => (list.order(a) < list.order(b) ? -1 : list.order(a) > list.order(b) ? 1 : 0));
        const bytes = Buffer.from(list.encode(next));
        if (bytes.length > list.maxBytes) throw new ResourceExhaustedError(`${list.what} would be ${bytes.length} bytes, more than the ${list.maxBytes} one etcd write takes; ${list.smaller}`);
        if (await this.commitFenced(this.etcd.if(list.key, "Mod", "==", current.modRevision).then(this.etcd.put(list.key).value(bytes)))) return next;
      }
      throw new AbortedError(`${list.what} kept changing under ${MAX_UPDATE_ATTEMPTS} attempts to update it; try again`);
    });
  }

  async backupStatus(): Promise<BackupStatus | undefined> {
    const bytes = await this.etcd.get(BACKUP_STATUS_KEY).buffer();
    return bytes ? fromBinary(BackupStatusSchema, bytes) : undefined;
  }

  /** What the scheduled backups' node reported (Curator.ReportBackupStatus), fenced like every write. */
  async setBackupStatus(status: BackupStatus): Promise<void> {
    await this.commitFenced(this.etcd.if(BACKUP_STATUS_KEY, "Version", ">", -1).then(this.etcd.put(BACKUP_STATUS_KEY).value(Buffer.from(toBinary(BackupStatusSchema, status)))));
  }

  /** The tombstone of a node the owner deleted: the record it had then. */
  async deletedNode(id: string): Promise<NodeRecord | undefined> {
    const bytes = await this.etcd.get(DELETED_PREFIX + id).buffer();
    return bytes ? fromBinary(NodeRecordSchema, bytes) : undefined;
  }

  /** The deleted node a join key belonged to. */
  async deletedNodeByJoinKey(joinKey: Uint8Array): Promise<string | undefined> {
    return (await this.etcd.get(deletedJoinKeyIndex(joinKey)).string()) ?? undefined;
  }

  /** Lifts a deleted node's tombstone (the owner lets it register again): "lifted", or "not-found". */
  async undeleteNode(id: string): Promise<"lifted" | "not-found"> {
    const tombstone = await this.deletedNode(id);
    if (!tombstone) return "not-found";
    await this.commitFenced(this.etcd.if(DELETED_PREFIX + id, "Create", ">", 0).then(this.etcd.delete().key(DELETED_PREFIX + id), this.etcd.delete().key(deletedJoinKeyIndex(tombstone.joinKey))));
    return "lifted";
  }

  /**
   * Read-modify-write of one node record. `change` gets the current record
   * and returns the new one (or throws to refuse). Retries on conflicts.
   */
  async updateNode(id: string, change: (record: NodeRecord) => NodeRecord, signal?: AbortSignal): Promise<NodeRecord> {
    return this.oneAtATime(id, () => this.updateNodeNow(id, change, signal));
  }

  private async updateNodeNow(id: string, change: (record: NodeRecord) => NodeRecord, signal: AbortSignal | undefined): Promise<NodeRecord> {
    const key = NODES_PREFIX + id;
    for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
      // A caller that gave up (its deadline passed) gets no more attempts.
      signal?.throwIfAborted();
      const current = await this.node(id);
      // A race a client can start (a deletion under an update) is the client's news, never INTERNAL.
      if (!current) throw new NotFoundError(`node ${id} not found${attempt > 0 ? " (deleted meanwhile)" : ""}`);
      const next = change(create(NodeRecordSchema, current.value));
      if (await this.commitFenced(this.etcd.if(key, "Mod", "==", current.modRevision).then(this.etcd.put(key).value(Buffer.from(toBinary(NodeRecordSchema, next)))))) {
        return next;
      }
    }
    throw new AbortedError(`node ${id} kept changing under ${MAX_UPDATE_ATTEMPTS} attempts to update it; try again`);
  }

  /**
   * Sets a node's WireGuard key and, on its first call, assigns it the pod
   * prefix `choose` picks from those no node holds; in one transaction with
   * the prefix's claim key, so that two nodes never get the same prefix and
   * no record names a prefix that is not claimed for it. The prefix of a
   * node that has one never changes.
   *
   * The key is claimed the same way (wireguardKeyIndex): a key another
   * node holds is refused (AlreadyExistsError), whether its index says so
   * or, for a record written before the index, the record itself. The same
   * key sent again writes nothing.
   */
  async assignClusterNetworking(id: string, wireguardPublicKey: Uint8Array, choose: (taken: ReadonlySet<string>) => string, signal?: AbortSignal): Promise<NodeRecord> {
    return this.oneAtATime(id, async () => {
      const key = NODES_PREFIX + id;
      for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
        signal?.throwIfAborted();
        const current = await this.node(id);
        if (!current) throw new NotFoundError(`node ${id} not found (deleted meanwhile?)`);
        const had = current.value.clusterNetworking;
        const held = had?.podPrefix;
        const index = wireguardKeyIndex(wireguardPublicKey);
        const holder = (await this.etcd.get(index).string()) ?? undefined;
        if (held && had && Buffer.from(had.wireguardPublicKey).equals(Buffer.from(wireguardPublicKey)) && holder === id) return current.value;
        const squatted =
          holder !== undefined
            ? holder !== id
            : (await this.nodes()).nodes.some((n) => n.id !== id && Buffer.from(n.clusterNetworking?.wireguardPublicKey ?? []).equals(Buffer.from(wireguardPublicKey)));
        if (squatted) throw new AlreadyExistsError("this WireGuard public key is another node's; each node makes its own");
        const next = create(NodeRecordSchema, current.value);
        const prefix = held || choose(await this.heldPodPrefixes());
        next.clusterNetworking = create(ClusterNetworkingSchema, { wireguardPublicKey, podPrefix: prefix });
        const ops: Parameters<ComparatorBuilder["then"]> = [this.etcd.put(key).value(Buffer.from(toBinary(NodeRecordSchema, next)))];
        let txn = this.etcd.if(key, "Mod", "==", current.modRevision);
        // The key's claim: made now, or already this node's.
        if (holder === undefined) {
          txn = txn.and(index, "Version", "==", 0);
          ops.push(this.etcd.put(index).value(id));
        } else txn = txn.and(index, "Value", "==", id);
        // The key it had before is free again.
        const before = had?.wireguardPublicKey.length ? wireguardKeyIndex(had.wireguardPublicKey) : undefined;
        if (before !== undefined && before !== index) ops.push(this.etcd.delete().key(before));
        if (!held) {
          txn = txn.and(podPrefixKey(prefix), "Version", "==", 0);
          ops.push(this.etcd.put(podPrefixKey(prefix)).value(id));
        }
        if (await this.commitFenced(txn.then(...ops))) return next;
      }
      throw new AbortedError(`node ${id} kept changing under ${MAX_UPDATE_ATTEMPTS} attempts to set its cluster networking; try again`);
    });
  }

  /** The pod prefixes some node holds. */
  async heldPodPrefixes(): Promise<Set<string>> {
    const keys = await this.etcd.getAll().prefix(POD_PREFIXES_PREFIX).keys();
    return new Set(keys.map((k) => k.slice(POD_PREFIXES_PREFIX.length).replace("_", "/")));
  }

  /**
   * Deletes a node record and its join key index together, if the record is
   * still the version `check` approved (it throws to refuse). "deleted", or
   * "not-found" if there is no such node.
   */
  async deleteNode(id: string, check: (record: NodeRecord) => void, signal?: AbortSignal): Promise<"deleted" | "not-found"> {
    return this.oneAtATime(id, () => this.deleteNodeNow(id, check, signal));
  }

  private async deleteNodeNow(id: string, check: (record: NodeRecord) => void, signal: AbortSignal | undefined): Promise<"deleted" | "not-found"> {
    const key = NODES_PREFIX + id;
    for (let attempt = 0; attempt < MAX_UPDATE_ATTEMPTS; attempt++) {
      signal?.throwIfAborted();
      const current = await this.node(id);
      if (!current) return "not-found";
      check(current.value);
      const index = joinKeyIndex(current.value.joinKey);
      // The record goes and its tombstone comes in one transaction: no moment in which the node could register again.
      const tombstone = this.etcd.put(DELETED_PREFIX + id).value(Buffer.from(toBinary(NodeRecordSchema, current.value)));
      const joinKeyTombstone = this.etcd.put(deletedJoinKeyIndex(current.value.joinKey)).value(id);
      // Its pod prefix is free again with it.
      const prefix = current.value.clusterNetworking?.podPrefix;
      const releases = prefix ? [this.etcd.delete().key(podPrefixKey(prefix))] : [];
      // And its WireGuard key.
      const wireguardKey = current.value.clusterNetworking?.wireguardPublicKey;
      if (wireguardKey?.length) releases.push(this.etcd.delete().key(wireguardKeyIndex(wireguardKey)));
      if (await this.commitFenced(this.etcd.if(key, "Mod", "==", current.modRevision).then(this.etcd.delete().key(key), this.etcd.delete().key(index), tombstone, joinKeyTombstone, ...releases))) {
        return "deleted";
      }
    }
    throw new AbortedError(`node ${id} kept changing under ${MAX_UPDATE_ATTEMPTS} attempts to delete it; try again`);
  }

  /**
   * Writes the initial state of a new cluster in one transaction, unless a
   * cluster record exists (then it returns false and writes nothing).
   */
  async bootstrap(state: { cluster: ClusterRecord; clusterCA: CA; etcdCA: CA; firstNode: NodeRecord }): Promise<boolean> {
    const caBytes = (ca: CA) =>
      Buffer.from(
        toBinary(
          CertificateAuthoritySchema,
          create(CertificateAuthoritySchema, {
            certificate: new Uint8Array(ca.certificate.raw),
            privateKey: rawPrivateKey(ca.privateKey),
          }),
        ),
      );
    const result = await this.etcd
      .if(CLUSTER_KEY, "Create", "==", 0)
      .then(
        this.etcd.put(CLUSTER_KEY).value(Buffer.from(toBinary(ClusterRecordSchema, state.cluster))),
        this.etcd.put(CA_KEYS.cluster).value(caBytes(state.clusterCA)),
        this.etcd.put(CA_KEYS.etcd).value(caBytes(state.etcdCA)),
        this.etcd.put(NODES_PREFIX + state.firstNode.id).value(Buffer.from(toBinary(NodeRecordSchema, state.firstNode))),
        this.etcd.put(joinKeyIndex(state.firstNode.joinKey)).value(state.firstNode.id),
      )
      .commit();
    return result.succeeded;
  }
}

/** The add-on manifests as stored under MANIFESTS_KEY. */
export function decodeManifests(bytes: Uint8Array): Manifest[] {
  return fromBinary(ManifestsRecordSchema, bytes).manifests;
}

/** The entries of the registry configuration as stored under REGISTRIES_KEY. */
export function decodeRegistries(bytes: Uint8Array): ContainerRegistry[] {
  return fromBinary(ContainerRegistriesRecordSchema, bytes).registries;
}

/** A CA as stored under CA_KEYS. */
export function decodeCA(bytes: Uint8Array): CA {
  const record = fromBinary(CertificateAuthoritySchema, bytes);
  return { certificate: new X509Certificate(record.certificate), privateKey: privateKeyFromRaw(record.privateKey) };
}

export function missingCA(kind: CAKind): StoreError {
  return new StoreError(`the ${kind} CA is missing from etcd: was the cluster bootstrapped?`);
}

export function joinKeyIndex(joinKey: Uint8Array): string {
  return JOIN_KEYS_PREFIX + Buffer.from(joinKey).toString("hex");
}

function deletedJoinKeyIndex(joinKey: Uint8Array): string {
  return DELETED_JOIN_KEYS_PREFIX + Buffer.from(joinKey).toString("hex");
}
