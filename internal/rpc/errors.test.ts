// What grpc-js says when a channel could not connect, classified.

import { describe, expect, test } from "bun:test";
import { RpcError, Status, connectionFailureOf } from "./errors.ts";

const failed = (lastError: string) => `No connection established. Last error: ${lastError}. Resolution note: `;

describe("connection failures", () => {
  test("a refused connection names the address, IPv6 in brackets", () => {
    expect(connectionFailureOf(failed("Error: connect ECONNREFUSED 127.0.0.1:1"))).toEqual({
      kind: "refused",
      cause: "connect ECONNREFUSED 127.0.0.1:1",
      errno: "ECONNREFUSED",
      address: "127.0.0.1:1",
      reason: "connection refused at 127.0.0.1:1",
    });
    expect(connectionFailureOf(failed("Error: connect ECONNREFUSED fd00::2:7835 (2026-01-02T03:04:05.678Z)"))?.reason).toBe("connection refused at [fd00::2]:7835");
  });

  test("no route to the host or the network is unreachable", () => {
    expect(connectionFailureOf(failed("Error: connect EHOSTUNREACH 10.77.0.11:7835 - Local (10.0.0.1:40000)"))).toMatchObject({
      kind: "unreachable",
      errno: "EHOSTUNREACH",
      reason: "no route to 10.77.0.11:7835 (host unreachable)",
    });
    expect(connectionFailureOf(failed("connect ENETUNREACH 10.77.0.11:7835"))?.reason).toBe("no route to 10.77.0.11:7835 (network unreachable)");
  });

  test("TLS verify errors, as bun and Node word them, are untrusted certificates", () => {
    for (const message of [
      "unable to verify the first certificate",
      "self signed certificate in certificate chain",
      "self-signed certificate",
      "unable to get local issuer certificate",
      "certificate has expired",
    ]) {
      expect(connectionFailureOf(failed(`Error: ${message}`))).toMatchObject({ kind: "untrusted", cause: message });
    }
  });

  test("a refused server identity (tls.ts) is an identity failure, in its own words", () => {
    expect(connectionFailureOf(failed("Error: server identity refused: expected curator node-a at 10.0.0.2, but node-b answered"))).toMatchObject({
      kind: "identity",
      reason: "expected curator node-a at 10.0.0.2, but node-b answered",
    });
  });

  test("anything else is a failed connection in grpc-js's words; other details are no connection failure", () => {
    expect(connectionFailureOf(failed("Error: Client network socket disconnected before secure TLS connection was established"))).toMatchObject({
      kind: "failed",
      reason: "connection failed: Client network socket disconnected before secure TLS connection was established",
    });
    expect(connectionFailureOf("not the leader")).toBeUndefined();
    expect(new RpcError(Status.UNAVAILABLE, failed("Error: connect ECONNREFUSED 127.0.0.1:1"), "M/m").connectionFailure?.kind).toBe("refused");
    expect(new RpcError(Status.INTERNAL, failed("Error: connect ECONNREFUSED 127.0.0.1:1"), "M/m").connectionFailure).toBeUndefined();
  });
});
