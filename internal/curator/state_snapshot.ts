// One consistent state of the curator's keys in etcd (everything under
// ETCD_PREFIX) at one revision, read from memory with the same typed
// getters as CuratorStore's reads. The state cache (state_cache.ts) hands
// these out; a snapshot never changes after it is made.
//
// Records are decoded once per stored version (the decoded value is kept on
// the entry, which every snapshot holding that version shares), so callers
// get shared objects: they read them, never change them.

import { fromBinary } from "@bufbuild/protobuf";
import { ClusterRecordSchema, NodeRecordSchema, type ClusterRecord, type NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import type { ContainerRegistry, Manifest } from "../../proto/gen/common/common_pb.ts";
import type { CA } from "../pki/mod.ts";
import { CA_KEYS, CLUSTER_KEY, MANIFESTS_KEY, NODES_PREFIX, REGISTRIES_KEY, decodeCA, decodeManifests, decodeRegistries, joinKeyIndex, missingCA, type CAKind } from "./store.ts";

/** One key's stored version. */
export interface StateEntry {
  value: Uint8Array;
  /** The revision of the write that stored this value. */
  modRevision: bigint;
  /** The value decoded, once someone asked (CA, ClusterRecord or NodeRecord, by key). */
  decoded?: unknown;
}

export class StateSnapshot {
  /** The etcd revision this state is etcd's state at. */
  readonly revision: bigint;
  readonly #entries: ReadonlyMap<string, StateEntry>;
  #nodes: readonly NodeRecord[] | undefined;

  /** `entries` by key relative to ETCD_PREFIX; the snapshot owns the map from now on. */
  constructor(revision: bigint, entries: ReadonlyMap<string, StateEntry>) {
    this.revision = revision;
    this.#entries = entries;
  }

  cluster(): ClusterRecord | undefined {
    return this.#decoded(CLUSTER_KEY, (bytes) => fromBinary(ClusterRecordSchema, bytes));
  }

  ca(kind: CAKind): CA {
    const ca = this.#decoded(CA_KEYS[kind], decodeCA);
    if (!ca) throw missingCA(kind);
    return ca;
  }

  node(id: string): NodeRecord | undefined {
    return this.#decoded(NODES_PREFIX + id, decodeNode);
  }

  /** Every node record, sorted by ID. */
  nodes(): readonly NodeRecord[] {
    if (!this.#nodes) {
      const nodes: NodeRecord[] = [];
      for (const key of this.#entries.keys()) if (key.startsWith(NODES_PREFIX)) nodes.push(this.#decoded(key, decodeNode)!);
      this.#nodes = nodes.sort((a, b) => a.id.localeCompare(b.id));
    }
    return this.#nodes;
  }

  /** The registry configuration's entries, sorted by host (empty: never set). */
  registries(): readonly ContainerRegistry[] {
    return this.#decoded(REGISTRIES_KEY, decodeRegistries) ?? [];
  }

  /** The owner's add-on manifests, sorted by name (empty: never set). */
  manifests(): readonly Manifest[] {
    return this.#decoded(MANIFESTS_KEY, decodeManifests) ?? [];
  }

  /** The ID of the node that holds this join key, if any. */
  nodeIdByJoinKey(joinKey: Uint8Array): string | undefined {
    return this.#decoded(joinKeyIndex(joinKey), (bytes) => Buffer.from(bytes).toString());
  }

  /** The node whose join key this is, if any. */
  nodeByJoinKey(joinKey: Uint8Array): NodeRecord | undefined {
    const id = this.nodeIdByJoinKey(joinKey);
    const node = id === undefined ? undefined : this.node(id);
    // The index and the record are written together; check anyway.
    return node && Buffer.from(node.joinKey).equals(Buffer.from(joinKey)) ? node : undefined;
  }

  #decoded<T>(key: string, decode: (bytes: Uint8Array) => T): T | undefined {
    const entry = this.#entries.get(key);
    if (!entry) return undefined;
    entry.decoded ??= decode(entry.value);
    return entry.decoded as T;
  }
}

function decodeNode(bytes: Uint8Array): NodeRecord {
  return fromBinary(NodeRecordSchema, bytes);
}
