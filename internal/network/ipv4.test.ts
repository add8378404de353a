import { describe, expect, test } from "bun:test";
import { classfulPrefixLength, formatIPv4, InvalidAddressError, ipv4Bytes, netmaskOf, parseIPv4, prefixLengthOf } from "./ipv4.ts";

describe("ipv4", () => {
  test("dotted addresses convert to numbers and bytes and back", () => {
    expect(parseIPv4("10.1.2.3")).toBe(0x0a010203);
    expect(parseIPv4("255.255.255.255")).toBe(0xffffffff);
    expect(formatIPv4(0xc0a80001)).toBe("192.168.0.1");
    expect([...ipv4Bytes("192.168.0.1")]).toEqual([192, 168, 0, 1]);
  });

  test("malformed addresses are rejected", () => {
    for (const text of ["10.1.2", "10.1.2.256", "a.b.c.d", "10.1.2.3.4", "", "1.2.3.-4"]) {
      expect(() => parseIPv4(text)).toThrow(InvalidAddressError);
    }
  });

  test("netmasks convert to prefix lengths and back", () => {
    for (const prefix of [0, 1, 8, 23, 24, 31, 32]) expect(prefixLengthOf(netmaskOf(prefix))).toBe(prefix);
    expect(netmaskOf(24)).toBe("255.255.255.0");
    expect(prefixLengthOf("255.255.240.0")).toBe(20);
    expect(() => prefixLengthOf("255.0.255.0")).toThrow("non-contiguous netmask 255.0.255.0");
  });

  test("an address without a mask gets its class's prefix length", () => {
    expect(classfulPrefixLength("10.0.0.1")).toBe(8);
    expect(classfulPrefixLength("172.16.0.1")).toBe(16);
    expect(classfulPrefixLength("192.168.1.1")).toBe(24);
  });
});
