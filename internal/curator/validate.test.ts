import { describe, expect, test } from "bun:test";
import { checkAddressProven } from "./validate.ts";

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
