import { describe, expect, test } from "bun:test";
import { x25519 } from "@noble/curves/ed25519.js";
import { checkAddressProven, checkWireguardKey } from "./validate.ts";

describe("a reported address is held against the call's source", () => {
  const refusal = (reported: string, source: string | undefined) => {
    try {
      checkAddressProven("status.external_address", reported, source);
      return "accepted";
    } catch (err) {
      return (err as Error).message;
    }
  };

  test("the address the call came from is the node's, in any spelling of it", () => {
    expect(refusal("10.77.0.12", "10.77.0.12")).toBe("accepted");
    expect(refusal("FD00:0:0:0:0:0:0:2", "fd00::2")).toBe("accepted");
  });

  test("loopback for loopback: node processes on one host dial from 127.0.0.1", () => {
    expect(refusal("127.0.1.5", "127.0.0.1")).toBe("accepted");
  });

  test("another machine's address is refused, naming both, and so is a call whose source is unknown", () => {
    expect(refusal("10.77.0.13", "10.77.0.12")).toBe("status.external_address: '10.77.0.13' is not the address this call came from (10.77.0.12); a node reports the address it dials the cluster from");
    expect(refusal("127.0.0.1", "10.77.0.12")).toContain("is not the address this call came from");
    expect(refusal("10.77.0.12", "127.0.0.1")).toContain("is not the address this call came from");
    expect(refusal("10.77.0.12", undefined)).toContain("cannot see the address this call came from");
  });
});

describe("a WireGuard key must be a Curve25519 point a peer can trust", () => {
  const refusal = (key: Uint8Array) => {
    try {
      checkWireguardKey("wireguard_public_key", key);
      return "accepted";
    } catch (err) {
      return (err as Error).message;
    }
  };

  test("a key made from a private key passes", () => {
    expect(refusal(x25519.getPublicKey(x25519.utils.randomSecretKey()))).toBe("accepted");
  });

  test("the wrong length, the zero point and the other low-order points are refused, naming the cause", () => {
    expect(refusal(new Uint8Array(31))).toBe("wireguard_public_key: must be 32 bytes (a Curve25519 public key), got 31");
    expect(refusal(new Uint8Array(32))).toBe("wireguard_public_key: is not a valid Curve25519 public key (a low-order point)");
    // u = 1 (order 4) and the order-8 point with u = 0x…b8495f16 (little endian) are on every list of them.
    const one = new Uint8Array(32);
    one[0] = 1;
    expect(refusal(one)).toContain("low-order point");
    const order8 = Buffer.from("e0eb7a7c3b41b8ae1656e3faf19fc46ada098deb9c32b1fd866205165f49b800", "hex");
    expect(refusal(new Uint8Array(order8))).toContain("low-order point");
  });
});
