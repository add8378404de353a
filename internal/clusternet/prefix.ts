// Pod prefixes: each worker's /24 out of the cluster CIDR, assigned by the
// curator (service_curator.ts, UpdateNodeClusterNetworking) and by nobody
// else, so that what a node's peers route to it is what the cluster's
// records say.
//
//   CLUSTER_CIDR 10.244.0.0/16 ─▶ 10.244.0.0/24, 10.244.1.0/24, … 10.244.255.0/24
//
// A prefix is held by one node at a time: the key podprefixes/<prefix> names
// its holder, written in the same etcd transaction as the node's record
// (curator/store.ts, assignClusterNetworking), and deleted in the one that deletes
// the node. The lowest free prefix goes first.

/** The pods' network: every worker's pod prefix is cut out of it (kube-proxy tells pod traffic by it, internal/kubernetes). */
export const CLUSTER_CIDR = "10.244.0.0/16";

/** Every node's pod prefix is this long. */
export const POD_PREFIX_LENGTH = 24;

/** An IPv4 prefix, as numbers. */
export interface Prefix {
  base: number;
  length: number;
}

/** "10.244.0.0/16" → its base and length; undefined if it is not an IPv4 prefix with no host bits set. */
export function parsePrefix(text: string): Prefix | undefined {
  const match = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})\/(\d{1,2})$/.exec(text);
  if (!match) return undefined;
  const octets = match.slice(1, 5).map(Number);
  const length = Number(match[5]);
  if (octets.some((o) => o > 255) || length > 32) return undefined;
  const base = ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
  if (length < 32 && base % 2 ** (32 - length) !== 0) return undefined;
  return { base, length };
}

export function formatPrefix(prefix: Prefix): string {
  const b = prefix.base;
  return `${b >>> 24}.${(b >>> 16) & 255}.${(b >>> 8) & 255}.${b & 255}/${prefix.length}`;
}

/** Whether `inner` lies within `outer`. */
export function contains(outer: Prefix, inner: Prefix): boolean {
  if (inner.length < outer.length) return false;
  const size = 2 ** (32 - outer.length);
  return inner.base >= outer.base && inner.base < outer.base + size;
}

/** The lowest pod prefix of `cluster` not in `taken` ("a.b.c.d/24" strings); undefined when all are. */
export function firstFreePodPrefix(taken: ReadonlySet<string>, cluster: string = CLUSTER_CIDR): string | undefined {
  const outer = parsePrefix(cluster);
  if (!outer || outer.length > POD_PREFIX_LENGTH) throw new Error(`cluster CIDR ${cluster} cannot hold /${POD_PREFIX_LENGTH} pod prefixes`);
  const step = 2 ** (32 - POD_PREFIX_LENGTH);
  const count = 2 ** (POD_PREFIX_LENGTH - outer.length);
  for (let i = 0; i < count; i++) {
    const prefix = formatPrefix({ base: outer.base + i * step, length: POD_PREFIX_LENGTH });
    if (!taken.has(prefix)) return prefix;
  }
  return undefined;
}

/** How many nodes the cluster CIDR has pod prefixes for. */
export function podPrefixCount(cluster: string = CLUSTER_CIDR): number {
  const outer = parsePrefix(cluster);
  if (!outer) throw new Error(`cluster CIDR ${cluster} is not an IPv4 prefix`);
  return 2 ** (POD_PREFIX_LENGTH - outer.length);
}
