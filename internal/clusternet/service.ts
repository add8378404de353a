// The cluster network runnable of a worker node.
//
//   key file (data partition) ──▶ WireGuard device INTERFACE_NAME, port WIREGUARD_PORT
//        │ public key                       ▲ peers and routes, from the records
//        ▼                                  │
//   register (curator) ──▶ pod prefix ──▶ podPrefix (CNI follows it)
//                                           │
//   nodes (the curator's watch) ──desiredPeers──▶ peerChanges against the
//                                                 device as the kernel reports it
//
// What the device holds is read back from the kernel before every change,
// so a peer someone removed by hand, or a route that went, comes back at the
// next change of the records, and a peer the records no longer vouch for
// goes. The pods' packets to anywhere else leave masqueraded
// (masquerade.ts). The device's address is the first address of the node's pod
// prefix (as /32), so that traffic the node itself sends into the mesh
// (Services reaching pods on other nodes) comes from an address its peers
// accept from it.
//
// Two kinds of route lead into the mesh:
//   main table      peer's pod prefix ──▶ INTERFACE_NAME     (everyone's traffic)
//   MESH_TABLE      peer's address/32 ──▶ INTERFACE_NAME     (only what a rule sends there)
//   rule MESH_RULE_PRIORITY: from <own pod prefix> lookup MESH_TABLE
// so a pod's packets to another node's address (the apiserver behind a
// ClusterIP, a host-network server, a NodePort) travel encrypted, while
// the node's own packets to that address, WireGuard's UDP among them, keep
// the plain route: a peer's address routed into the mesh for everyone would
// carry WireGuard's own packets into it.

import { x25519 } from "@noble/curves/ed25519.js";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import type { Node } from "../../proto/gen/curator/curator_pb.ts";
import type { Value } from "../event/mod.ts";
import { writeFileDurably } from "../localstorage/mod.ts";
import { addRule, createLink, deleteLink, deleteRoute, deleteRule, linkIndex, ourRoutes, ourRules, replaceRoute, RT_TABLE_MAIN, setAddress, setLinkUp } from "../network/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";
import { applyMasquerade, removeMasquerade } from "./masquerade.ts";
import { desiredPeers, peerChanges, WIREGUARD_PORT, type Peer, type Skipped } from "./peers.ts";
import { parsePrefix, formatPrefix } from "./prefix.ts";
import { readDevice, setDevice, type PeerState } from "./wireguard.ts";

/** The mesh's interface on every worker. */
export const INTERFACE_NAME = "nodecore-wg";
/** The routing table of the peers' node addresses (unused by anyone else in the image). */
export const MESH_TABLE = 199;
/** The rule that sends the pods' traffic to MESH_TABLE first; below the main table's 32766. */
export const MESH_RULE_PRIORITY = 1000;
/** How often the status line is refreshed (peers' last handshakes). */
const STATUS_INTERVAL_MS = 10_000;

export interface ClusterNetOptions {
  nodeId: string;
  /** On the data partition: the WireGuard private key, made on first use; it never leaves the node. */
  keyFile: string;
  /** Reports the public key to the curator; resolves to this node's pod prefix. */
  register: (publicKey: Uint8Array, signal: AbortSignal) => Promise<string>;
  /** Read: the cluster's node records, from the curator's watch. */
  nodes: Value<readonly Node[]>;
  /** Written: this node's pod prefix, once the curator assigned it. */
  podPrefix: Value<string>;
  /** The "clusternet" line of `ctl node services`. */
  report: (state: "starting" | "running", message: string) => void;
}

/** The private key in `path`, made (32 random bytes) and kept there if there is none. */
export function loadOrCreateKey(path: string): Uint8Array {
  if (existsSync(path)) {
    const key = new Uint8Array(readFileSync(path));
    if (key.length !== 32) throw new Error(`${path}: a WireGuard private key is 32 bytes, this file has ${key.length}; remove it to make a new key`);
    return key;
  }
  const key = x25519.utils.randomSecretKey();
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileDurably(path, key, { mode: 0o600 });
  return key;
}

/** The node's own address in its pod prefix: the prefix's first address. */
export function meshAddress(podPrefix: string): string {
  const prefix = parsePrefix(podPrefix);
  if (!prefix) throw new Error(`the curator assigned ${JSON.stringify(podPrefix)}, which is not an IPv4 prefix`);
  return formatPrefix({ base: prefix.base + 1, length: 32 }).replace("/32", "");
}

/**
 * WireGuard shakes hands again every 2 minutes while traffic flows, and
 * drops a session's keys after 3 (REJECT_AFTER_TIME): a handshake older
 * than that is stale.
 */
export const HANDSHAKE_STALE_MS = 180_000;

/**
 * A line about the peers for the status board. It names each peer's
 * handshake by state (current, stale, none yet), not by its age: the line
 * is pushed to the cluster whenever it changes, and an age would change it
 * every time it is read.
 */
export function describePeers(peers: readonly PeerState[], names: ReadonlyMap<string, { nodeId: string; podPrefix: string }>, skipped: readonly Skipped[], now = Date.now()): string {
  const parts = peers.map((p) => {
    const known = names.get(p.publicKey);
    const handshake = p.lastHandshakeMs === 0 ? "no handshake yet" : now - p.lastHandshakeMs <= HANDSHAKE_STALE_MS ? "handshake current" : "handshake stale";
    return `${known?.nodeId ?? "unknown"} ${known?.podPrefix ?? p.allowedIps.join(",")} (${handshake})`;
  });
  const left = skipped.map((s) => `${s.nodeId} left out: ${s.reason}`);
  return [`${peers.length} peer${peers.length === 1 ? "" : "s"}${parts.length ? `: ${parts.join("; ")}` : ""}`, ...left].join("; ");
}

/**
 * The routes and the rule the mesh needs, set against what the kernel
 * holds: missing ones are added, ones of ours that the peers no longer
 * call for are removed, and nothing else is touched.
 */
export function applyRoutes(ifindex: number, podPrefix: string, peers: readonly Peer[]): { added: string[]; removed: string[] } {
  const added: string[] = [];
  const removed: string[] = [];
  const converge = (table: number, wanted: readonly string[]) => {
    const named = (prefix: string) => (table === RT_TABLE_MAIN ? prefix : `${prefix} (table ${table})`);
    const have = ourRoutes(ifindex, table);
    const present = new Set(have.map((r) => r.prefix));
    for (const prefix of wanted) {
      if (present.has(prefix)) continue;
      replaceRoute({ prefix, ifindex, table });
      added.push(named(prefix));
    }
    for (const route of have) {
      if (wanted.includes(route.prefix)) continue;
      deleteRoute(route);
      removed.push(named(route.prefix));
    }
  };
  converge(
    RT_TABLE_MAIN,
    peers.map((p) => p.podPrefix),
  );
  converge(
    MESH_TABLE,
    peers.map((p) => `${p.endpoint.split(":")[0]}/32`),
  );
  const rule = { from: podPrefix, table: MESH_TABLE, priority: MESH_RULE_PRIORITY };
  for (const other of ourRules()) {
    if (other.from === rule.from && other.table === rule.table && other.priority === rule.priority) continue;
    deleteRule(other);
    removed.push(`rule from ${other.from}`);
  }
  if (addRule(rule)) added.push(`rule from ${rule.from}`);
  return { added, removed };
}

/**
 * Takes the mesh off a node that no longer runs a kubelet: the rule, the
 * masquerade, then the device (its routes go with it). Says whether there
 * was a device. The device is made before the rest and removed after it,
 * so a node without one has nothing else of the mesh to remove either.
 */
export async function leaveMesh(signal?: AbortSignal): Promise<boolean> {
  if (linkIndex(INTERFACE_NAME) === undefined) return false;
  for (const rule of ourRules()) deleteRule(rule);
  await removeMasquerade(signal);
  return deleteLink(INTERFACE_NAME);
}

export function clusterNetService(options: ClusterNetOptions): Runnable {
  return async (ctx) => {
    const privateKey = loadOrCreateKey(options.keyFile);
    const publicKey = x25519.getPublicKey(privateKey);
    options.report("starting", "WireGuard device and pod prefix");
    if (createLink(INTERFACE_NAME, "wireguard")) ctx.logger.info("created the WireGuard device", { device: INTERFACE_NAME });
    setDevice(INTERFACE_NAME, { privateKey, listenPort: WIREGUARD_PORT });
    const ifindex = linkIndex(INTERFACE_NAME);
    if (ifindex === undefined) throw new Error(`the WireGuard device ${INTERFACE_NAME} went away`);
    const podPrefix = await options.register(publicKey, ctx.signal);
    setAddress(INTERFACE_NAME, meshAddress(podPrefix), 32);
    setLinkUp(INTERFACE_NAME);
    await applyMasquerade(podPrefix, INTERFACE_NAME, ctx.signal);
    ctx.logger.info("in the cluster network", { device: INTERFACE_NAME, prefix: podPrefix, key: Buffer.from(publicKey).toString("base64") });
    options.podPrefix.set(podPrefix);

    let names = new Map<string, { nodeId: string; podPrefix: string }>();
    let skipped: Skipped[] = [];
    let lastSkipped = "";
    const apply = (nodes: readonly Node[]) => {
      const wanted = desiredPeers(options.nodeId, nodes);
      names = new Map(wanted.peers.map((p) => [p.publicKey, { nodeId: p.nodeId, podPrefix: p.podPrefix }]));
      skipped = wanted.skipped;
      const current = readDevice(INTERFACE_NAME).peers;
      const { set, remove } = peerChanges(current, wanted.peers);
      if (set.length || remove.length) {
        setDevice(INTERFACE_NAME, { set, remove });
        ctx.logger.info("mesh peers changed", { set: set.map((p) => `${p.nodeId}=${p.allowedIps.join(",")}@${p.endpoint}`).join(" "), removed: remove.length });
      }
      const routes = applyRoutes(ifindex, podPrefix, wanted.peers);
      if (routes.added.length || routes.removed.length) ctx.logger.info("mesh routes changed", { added: routes.added.join(" "), removed: routes.removed.join(" ") });
      const summary = JSON.stringify(skipped);
      if (summary !== lastSkipped && skipped.length) ctx.logger.info("nodes left out of the mesh", { nodes: skipped.map((s) => `${s.nodeId}: ${s.reason}`).join("; ") });
      lastSkipped = summary;
    };
    const status = () => options.report("running", `${INTERFACE_NAME} ${podPrefix}; ${describePeers(readDevice(INTERFACE_NAME).peers, names, skipped)}`);

    let nodes = await options.nodes.get({ signal: ctx.signal });
    apply(nodes);
    status();
    ctx.signalHealthy();
    const timer = setInterval(() => {
      try {
        status();
      } catch (err) {
        ctx.logger.warn("could not read the WireGuard device", { error: (err as Error).message });
      }
    }, STATUS_INTERVAL_MS);
    try {
      for (;;) {
        nodes = await options.nodes.waitFor((n) => n !== nodes, { signal: ctx.signal });
        apply(nodes);
      }
    } finally {
      clearInterval(timer);
    }
  };
}
