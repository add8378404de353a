import { describe, expect, test } from "bun:test";
import { contains, firstFreePodPrefix, formatPrefix, parsePrefix, podPrefixCount } from "./prefix.ts";

describe("pod prefixes", () => {
  test("the lowest /24 of the cluster CIDR that nobody holds goes first", () => {
    expect(firstFreePodPrefix(new Set())).toBe("10.244.0.0/24");
    expect(firstFreePodPrefix(new Set(["10.244.0.0/24", "10.244.2.0/24"]))).toBe("10.244.1.0/24");
    expect(firstFreePodPrefix(new Set(["10.0.0.0/24", "10.0.1.0/24"]), "10.0.0.0/23")).toBeUndefined();
    expect(podPrefixCount()).toBe(256);
  });

  test("prefixes parse only as IPv4 with no host bits, and containment is by range", () => {
    expect(parsePrefix("10.244.3.0/24")).toEqual({ base: 10 * 2 ** 24 + (244 << 16) + (3 << 8), length: 24 });
    for (const bad of ["10.244.3.1/24", "10.244.3.0", "10.244.300.0/24", "fd00::/64", "10.244.3.0/33", " 10.244.3.0/24"]) expect(parsePrefix(bad)).toBeUndefined();
    expect(formatPrefix(parsePrefix("192.168.0.0/16")!)).toBe("192.168.0.0/16");
    expect(contains(parsePrefix("10.244.0.0/16")!, parsePrefix("10.244.255.0/24")!)).toBe(true);
    expect(contains(parsePrefix("10.244.0.0/16")!, parsePrefix("10.245.0.0/24")!)).toBe(false);
    expect(contains(parsePrefix("10.244.0.0/24")!, parsePrefix("10.244.0.0/16")!)).toBe(false);
  });

  test("a cluster CIDR too small for a /24 is a programming error, said plainly", () => {
    expect(() => firstFreePodPrefix(new Set(), "10.0.0.0/25")).toThrow("cluster CIDR 10.0.0.0/25 cannot hold /24 pod prefixes");
  });
});
