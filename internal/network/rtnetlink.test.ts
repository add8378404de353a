// rtnetlink against the real kernel, in a network namespace the test makes.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { attr, decodeAttributes, decodeMessages, encodeAttributes, encodeMessage, NLA_F_NESTED } from "./netlink.ts";

const NAMESPACE = `nodecore-rtnl-${process.pid}`;

describe("netlink encoding", () => {
  test("attributes are length, type, payload, padded to 4; nested ones carry NLA_F_NESTED and read back", () => {
    const bytes = encodeAttributes([attr.string(3, "wg0"), attr.nested(18, [attr.string(1, "wireguard")]), attr.u16(6, 51820)]);
    expect([...bytes.subarray(0, 8)]).toEqual([8, 0, 3, 0, 0x77, 0x67, 0x30, 0]);
    expect(new DataView(bytes.buffer).getUint16(10, true)).toBe(18 | NLA_F_NESTED);
    const decoded = decodeAttributes(bytes);
    expect(new TextDecoder().decode(decoded.get(3)![0])).toBe("wg0\0");
    expect(new TextDecoder().decode(decodeAttributes(decoded.get(18)![0]!).get(1)![0])).toBe("wireguard\0");
    expect(new DataView(decoded.get(6)![0]!.buffer, decoded.get(6)![0]!.byteOffset).getUint16(0, true)).toBe(51820);
  });

  test("a message is a 16-byte header and its payload; several in a datagram read back in order", () => {
    const one = encodeMessage({ type: 16, flags: 5, payload: Uint8Array.of(1, 2, 3) }, 7);
    expect(one.length).toBe(20);
    expect(new DataView(one.buffer).getUint32(0, true)).toBe(19);
    const two = encodeMessage({ type: 3, flags: 0, payload: new Uint8Array(4) }, 8);
    const both = new Uint8Array([...one, ...two]);
    expect(decodeMessages(both).map((m) => [m.type, m.seq, m.payload.length])).toEqual([
      [16, 7, 3],
      [3, 8, 4],
    ]);
  });
});

describe("rtnetlink on the real kernel", () => {
  beforeAll(() => {
    const made = Bun.spawnSync(["ip", "netns", "add", NAMESPACE]);
    if (made.exitCode !== 0) throw new Error(`ip netns add: ${made.stderr.toString()}`);
  });
  afterAll(() => {
    Bun.spawnSync(["ip", "netns", "del", NAMESPACE]);
  });

  test("a link is made once, routes through it are added, replaced, listed as ours (by table) and removed, a source rule is added once, listed and removed, a bad kind is named, and the link is deleted", () => {
    const run = Bun.spawnSync(["ip", "netns", "exec", NAMESPACE, process.execPath, join(import.meta.dir, "rtnetlink_driver.ts")]);
    expect(run.stderr.toString()).toBe("");
    const seen = JSON.parse(run.stdout.toString());
    expect(seen.created).toBe(true);
    expect(seen.again).toBe(false);
    expect(seen.index).toBeGreaterThan(1);
    expect(seen.missing).toBeNull();
    expect(seen.routes.sort()).toEqual(["10.244.7.0/24", "10.244.9.0/24"]);
    expect(seen.after).toEqual(["10.244.9.0/24"]);
    expect(seen.tabled).toEqual({ main: ["10.244.9.0/24"], other: ["10.77.0.13/32 table 199"] });
    // Added once (the second add finds it), listed as ours, deleted twice without error.
    expect(seen.ruleAdded).toEqual([true, false]);
    expect(seen.rules).toEqual([{ from: "10.244.9.0/24", table: 199, priority: 1000 }]);
    expect(seen.rulesAfter).toEqual([]);
    expect(seen.refused).toMatch(/^creating link nc-test1 \(no-such-kind\): EOPNOTSUPP/);
    // Deleted once; a second time finds nothing.
    expect(seen.deleted).toEqual([true, false, null]);
  });
});
