// The WireGuard netlink messages, byte for byte where the kernel reads
// them, and generic netlink's family lookup on the real kernel (this host's
// kernel has no WireGuard; the qemu e2e drives the real device).

import { describe, expect, test } from "bun:test";
import { decodeAttributes, encodeAttributes, NETLINK_GENERIC, withNetlink } from "../network/mod.ts";
import { genlFamily, parseDevice, setDeviceAttributes, sockaddrIn } from "./wireguard.ts";

const KEY_A = Buffer.alloc(32, 1).toString("base64");
const KEY_B = Buffer.alloc(32, 2).toString("base64");

describe("WireGuard over generic netlink", () => {
  test("an endpoint is a sockaddr_in: family in host order, port and address in network order", () => {
    expect([...sockaddrIn("10.77.0.12:51820")]).toEqual([2, 0, 0xca, 0x6c, 10, 77, 0, 12, 0, 0, 0, 0, 0, 0, 0, 0]);
  });

  test("a set-device request names the device, the key and port, the peers to set and those to remove", () => {
    const bytes = encodeAttributes(
      setDeviceAttributes("nodecore-wg", {
        privateKey: new Uint8Array(32).fill(9),
        listenPort: 51820,
        set: [{ nodeId: "node-b", publicKey: KEY_A, endpoint: "10.77.0.12:51820", allowedIps: ["10.244.2.0/24", "10.77.0.12/32"], podPrefix: "10.244.2.0/24" }],
        remove: [KEY_B],
      }),
    );
    // What a device dump answers has the same shape: read it back with the dump's parser.
    const device = decodeAttributes(bytes);
    expect(new TextDecoder().decode(device.get(2)![0])).toBe("nodecore-wg\0");
    expect(device.get(3)![0]).toEqual(new Uint8Array(32).fill(9));
    const { listenPort, peers } = parseDevice([bytes]);
    expect(listenPort).toBe(51820);
    expect(peers.map((p) => [p.publicKey, p.endpoint, p.allowedIps])).toEqual([
      [KEY_A, "10.77.0.12:51820", ["10.244.2.0/24", "10.77.0.12/32"]],
      [KEY_B, "", []],
    ]);
    // The peer to remove carries WGPEER_F_REMOVE_ME (1); the one to set, WGPEER_F_REPLACE_ALLOWEDIPS (2).
    const flags = [...decodeAttributes(device.get(8)![0]!).get(0)!].map((peer) => decodeAttributes(peer).get(3)![0]![0]);
    expect(flags).toEqual([2, 1]);
  });

  test("a dump's handshake time and byte counts are read from their 64-bit fields", () => {
    const timespec = new Uint8Array(16);
    new DataView(timespec.buffer).setBigUint64(0, 1_700_000_000n, true);
    new DataView(timespec.buffer).setBigUint64(8, 250_000_000n, true);
    const u64 = (n: bigint) => {
      const b = new Uint8Array(8);
      new DataView(b.buffer).setBigUint64(0, n, true);
      return b;
    };
    const peer = encodeAttributes([
      { type: 1, value: Buffer.alloc(32, 1) },
      { type: 6, value: timespec },
      { type: 7, value: u64(1234n) },
      { type: 8, value: u64(5678n) },
    ]);
    const device = encodeAttributes([{ type: 8 | 0x8000, value: [{ type: 0 | 0x8000, value: decodeAttributesList(peer) }] }]);
    const [state] = parseDevice([device]).peers;
    expect(state).toMatchObject({ publicKey: KEY_A, lastHandshakeMs: 1_700_000_000_250, rxBytes: 1234, txBytes: 5678 });
  });

  test("generic netlink names its own family's ID, and a family the kernel lacks is undefined", () => {
    withNetlink(NETLINK_GENERIC, (nl) => {
      expect(genlFamily(nl, "nlctrl")).toBe(16);
      expect(genlFamily(nl, "no-such-family")).toBeUndefined();
    });
  });
});

/** Attributes back into the list form encodeAttributes takes (flat, raw payloads). */
function decodeAttributesList(bytes: Uint8Array) {
  return [...decodeAttributes(bytes)].flatMap(([type, values]) => values.map((value) => ({ type, value })));
}
