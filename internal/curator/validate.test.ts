import { describe, expect, test } from "bun:test";
import { x25519 } from "@noble/curves/ed25519.js";
import { create, equals } from "@bufbuild/protobuf";
import { NodeStatusSchema, ServiceStatusSchema, UpdateFailureSchema, type NodeStatus, type UpdateFailure } from "../../proto/gen/common/common_pb.ts";
import { checkAddressProven, checkNodeStatus, checkWireguardKey, fitNodeStatus, MAX_SERVICE_MESSAGE_CHARS, MAX_SERVICES } from "./validate.ts";

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

describe("what a node says about its slots and its last failed update", () => {
  const status = (change: { slot?: string; updateFailure?: UpdateFailure }) =>
    create(NodeStatusSchema, { externalAddress: "10.77.0.12", timestampMs: BigInt(Date.now()), version: "0.2.0", ...change });
  const refusal = (s: NodeStatus) => {
    try {
      checkNodeStatus(s);
      return "accepted";
    } catch (err) {
      return (err as Error).message;
    }
  };

  test("a slot a or b, or none, and a failure with a version, a reason and a time, are accepted", () => {
    expect(refusal(status({ slot: "b", updateFailure: create(UpdateFailureSchema, { version: "0.3.0", reason: "did not rejoin", timeMs: 5n }) }))).toBe("accepted");
    expect(refusal(status({}))).toBe("accepted");
  });

  test("another slot, a reason too long or not printable, and a time in the far future are refused, naming the field", () => {
    expect(refusal(status({ slot: "c" }))).toBe("status.slot: 'c' is not a slot (a, b, or empty)");
    expect(refusal(status({ updateFailure: create(UpdateFailureSchema, { version: "1", reason: "x".repeat(513) }) }))).toStartWith("status.update_failure.reason:");
    expect(refusal(status({ updateFailure: create(UpdateFailureSchema, { version: "1", reason: "a\u001b[2Jb" }) }))).toStartWith("status.update_failure.reason:");
    expect(refusal(status({ updateFailure: create(UpdateFailureSchema, { version: "1", reason: "r", timeMs: BigInt(Date.now() + 7 * 86_400_000) }) }))).toStartWith("status.update_failure.time_ms:");
  });
});

describe("a node's status fitted to the curator's bounds before it is sent", () => {
  const hostile = ["x".repeat(5000), "a\u001b[2Jb".repeat(300), "\ud800".repeat(600), "é🙂".repeat(400), "line one\nline two\r\n\t".repeat(60)];
  const status = (message: string, services = 3) =>
    create(NodeStatusSchema, {
      externalAddress: "10.77.0.12",
      timestampMs: BigInt(Date.now()),
      version: `0.1.0+${message}`,
      kubernetesVersion: message,
      services: Array.from({ length: services }, (_, i) => create(ServiceStatusSchema, { name: `service-${i}`, state: "restarting", message })),
      updateFailure: create(UpdateFailureSchema, { version: message, reason: message, timeMs: 5n }),
    });

  test("whatever the messages hold, the fitted status passes the curator's check (a launched node's 634-character message got every push refused)", () => {
    for (const message of hostile) {
      expect(() => checkNodeStatus(status(message, 3))).toThrow();
      const fitted = fitNodeStatus(status(message, 3));
      expect(() => checkNodeStatus(fitted)).not.toThrow();
      const shown = fitted.services[0]!.message;
      expect(shown.length).toBeLessThanOrEqual(MAX_SERVICE_MESSAGE_CHARS);
      expect(shown.endsWith("…") || shown.length < MAX_SERVICE_MESSAGE_CHARS).toBe(true);
    }
    expect(() => checkNodeStatus(fitNodeStatus(status("ok", 100)))).not.toThrow();
    expect(fitNodeStatus(status("ok", 100)).services).toHaveLength(MAX_SERVICES);
  });

  test("a status within bounds is sent as it is, and a long message keeps its beginning", () => {
    const fine = create(NodeStatusSchema, { ...status("ok"), version: "0.1.0", kubernetesVersion: "v1.37.2" });
    expect(equals(NodeStatusSchema, fitNodeStatus(fine), fine)).toBe(true);
    const long = fitNodeStatus(status("kube-apiserver: " + "y".repeat(700))).services[0]!.message;
    expect(long).toStartWith("kube-apiserver: yyy");
    expect(long).toHaveLength(MAX_SERVICE_MESSAGE_CHARS);
  });
});
