// Record changes → the WireGuard peer set, as a node computes it from the
// curator's watch.

import { create } from "@bufbuild/protobuf";
import { x25519 } from "@noble/curves/ed25519.js";
import { describe, expect, test } from "bun:test";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { NodeSchema, type Node } from "../../proto/gen/curator/curator_pb.ts";
import { desiredPeers, peerChanges, WIREGUARD_PORT } from "./peers.ts";
import { describePeers } from "./service.ts";

const key = () => x25519.getPublicKey(x25519.utils.randomSecretKey());
const b64 = (bytes: Uint8Array) => Buffer.from(bytes).toString("base64");

/** A worker as the records show it once it reported its key: UP, with an address and a prefix. */
function worker(id: string, n: number, change: (node: Node) => void = () => {}): Node {
  const node = create(NodeSchema, {
    id,
    state: NodeState.UP,
    roles: { kubernetesWorker: {} },
    status: { externalAddress: `10.77.0.${10 + n}` },
    clusterNetworking: { wireguardPublicKey: key(), podPrefix: `10.244.${n}.0/24` },
  });
  change(node);
  return node;
}

describe("peers from the records", () => {
  test("every other UP worker with a key, a prefix and an address is a peer, sending from its prefix and its address, routed its prefix only", () => {
    const nodes = [worker("node-a", 1), worker("node-b", 2), worker("node-c", 3)];
    const { peers, skipped } = desiredPeers("node-a", nodes);
    expect(peers).toEqual([
      {
        nodeId: "node-b",
        publicKey: b64(nodes[1]!.clusterNetworking!.wireguardPublicKey),
        endpoint: `10.77.0.12:${WIREGUARD_PORT}`,
        allowedIps: ["10.244.2.0/24", "10.77.0.12/32"],
        podPrefix: "10.244.2.0/24",
      },
      {
        nodeId: "node-c",
        publicKey: b64(nodes[2]!.clusterNetworking!.wireguardPublicKey),
        endpoint: `10.77.0.13:${WIREGUARD_PORT}`,
        allowedIps: ["10.244.3.0/24", "10.77.0.13/32"],
        podPrefix: "10.244.3.0/24",
      },
    ]);
    expect(skipped).toEqual([]);
  });

  test("nodes the records do not vouch for are left out, each with its reason; non-workers silently", () => {
    const nodes = [
      worker("node-a", 1),
      worker("node-b", 2, (n) => (n.roles = create(NodeSchema).roles)),
      worker("node-c", 3, (n) => (n.state = NodeState.NEW)),
      worker("node-d", 4, (n) => (n.clusterNetworking = undefined)),
      worker("node-e", 5, (n) => (n.clusterNetworking!.podPrefix = "10.245.5.0/24")),
      worker("node-f", 6, (n) => (n.clusterNetworking!.podPrefix = "10.244.0.0/16")),
      worker("node-g", 7, (n) => (n.status!.externalAddress = "")),
      worker("node-h", 8, (n) => (n.clusterNetworking!.wireguardPublicKey = new Uint8Array(31))),
    ];
    const { peers, skipped } = desiredPeers("node-a", nodes);
    expect(peers).toEqual([]);
    expect(skipped).toEqual([
      { nodeId: "node-c", reason: "it is NEW, not UP" },
      { nodeId: "node-d", reason: "it has not reported a WireGuard key yet" },
      { nodeId: "node-e", reason: 'its pod prefix "10.245.5.0/24" is not a /24 of 10.244.0.0/16' },
      { nodeId: "node-f", reason: 'its pod prefix "10.244.0.0/16" is not a /24 of 10.244.0.0/16' },
      { nodeId: "node-g", reason: "it has not reported its address yet" },
      { nodeId: "node-h", reason: "its WireGuard key is 31 bytes, not 32" },
    ]);
  });

  test("a prefix or key that two records name goes to neither", () => {
    const b = worker("node-b", 2);
    const c = worker("node-c", 3, (n) => (n.clusterNetworking!.podPrefix = "10.244.2.0/24"));
    const d = worker("node-d", 4, (n) => (n.clusterNetworking!.wireguardPublicKey = worker("x", 9).clusterNetworking!.wireguardPublicKey));
    const e = worker("node-e", 5, (n) => (n.clusterNetworking!.wireguardPublicKey = d.clusterNetworking!.wireguardPublicKey));
    const { peers, skipped } = desiredPeers("node-a", [b, c, d, e, worker("node-f", 6)]);
    expect(peers.map((p) => p.nodeId)).toEqual(["node-f"]);
    expect(skipped).toEqual([
      { nodeId: "node-b", reason: "its pod prefix 10.244.2.0/24 is named by another node too" },
      { nodeId: "node-c", reason: "its pod prefix 10.244.2.0/24 is named by another node too" },
      { nodeId: "node-d", reason: "its WireGuard key is another node's too" },
      { nodeId: "node-e", reason: "its WireGuard key is another node's too" },
    ]);
  });
});

describe("changes to the interface", () => {
  test("a node added is set, a node whose address or key changed is set again, a node gone is removed", () => {
    const a = worker("node-a", 1);
    const b = worker("node-b", 2);
    const c = worker("node-c", 3);
    const before = desiredPeers("node-a", [a, b, c]).peers;
    // node-b moved to a new address, node-c was deleted, node-d joined.
    const moved = create(NodeSchema, b);
    moved.status!.externalAddress = "10.77.0.99";
    const d = worker("node-d", 4);
    const after = desiredPeers("node-a", [a, moved, d]).peers;
    const { set, remove } = peerChanges(before, after);
    expect(set.map((p) => [p.nodeId, p.endpoint])).toEqual([
      ["node-b", `10.77.0.99:${WIREGUARD_PORT}`],
      ["node-d", `10.77.0.14:${WIREGUARD_PORT}`],
    ]);
    expect(remove).toEqual([b64(c.clusterNetworking!.wireguardPublicKey)]);
    // Nothing changed: nothing to do.
    expect(peerChanges(after, after)).toEqual({ set: [], remove: [] });
  });
});

describe("the status line", () => {
  test("each peer by name with its prefix and its handshake's state, never its age; nodes left out with why", () => {
    const now = 1_000_000_000;
    const peer = (key: string, prefix: string, lastHandshakeMs: number) => ({
      nodeId: "",
      publicKey: key,
      endpoint: "",
      allowedIps: ["10.77.0.99/32", prefix],
      lastHandshakeMs,
      rxBytes: 0,
      txBytes: 0,
    });
    const names = new Map([
      ["k1", { nodeId: "node-b", podPrefix: "10.244.2.0/24" }],
      ["k2", { nodeId: "node-c", podPrefix: "10.244.3.0/24" }],
      ["k3", { nodeId: "node-d", podPrefix: "10.244.4.0/24" }],
    ]);
    const peers = [peer("k1", "10.244.2.0/24", now - 30_000), peer("k2", "10.244.3.0/24", now - 200_000), peer("k3", "10.244.4.0/24", 0)];
    expect(describePeers(peers, names, [{ nodeId: "node-e", reason: "it is NEW, not UP" }], now)).toBe(
      "3 peers: node-b 10.244.2.0/24 (handshake current); node-c 10.244.3.0/24 (handshake stale); node-d 10.244.4.0/24 (no handshake yet); node-e left out: it is NEW, not UP",
    );
    // A second later the line is the same: it is pushed only when it changes.
    expect(describePeers(peers, names, [], now + 1_000)).toBe(describePeers(peers, names, [], now));
    expect(describePeers([], names, [])).toBe("0 peers");
  });
});
