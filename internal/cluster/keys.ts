// The keys a node holds, and how the data partition key is made from them.

import { createHash, randomBytes } from "node:crypto";

/** Unlock keys and the data key are 32 bytes. */
export const KEY_BYTES = 32;
const DATA_KEY_CONTEXT = "nodecore data partition key v1";

export function randomKey(): Uint8Array {
  return new Uint8Array(randomBytes(KEY_BYTES));
}

/**
 * The data partition key: a hash of the node's half (kept on the node's
 * ESP) and the cluster's half (kept by the curator), so that neither the
 * disk alone nor the cluster alone can open the data.
 */
export function dataPartitionKey(nodeUnlockKey: Uint8Array, clusterUnlockKey: Uint8Array): Uint8Array {
  if (nodeUnlockKey.length !== KEY_BYTES || clusterUnlockKey.length !== KEY_BYTES) {
    throw new Error(`unlock keys must be ${KEY_BYTES} bytes (got ${nodeUnlockKey.length} and ${clusterUnlockKey.length})`);
  }
  return new Uint8Array(createHash("sha256").update(DATA_KEY_CONTEXT).update(nodeUnlockKey).update(clusterUnlockKey).digest());
}
