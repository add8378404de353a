// Errors as ctl prints them: hints for an untrusted curator and for
// addresses this machine has no route to (another network namespace).

import { describe, expect, test } from "bun:test";
import { BlockList } from "node:net";
import { NoCuratorError } from "../curator/client/mod.ts";
import { RpcError, Status } from "../rpc/mod.ts";
import { configPaths } from "./config_dir.ts";
import { UsageError } from "./cli_table.ts";
import { curatorFailureLine, explain } from "./explain.ts";
import { ipv4Routes, ipv6Routes, isRoutableFromHere, namespaceHint } from "./network_hint.ts";

const ROUTE = `Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
eth0\t0000000A\t00000000\t0201\t0\t0\t0\t000000FF\t0\t0\t0
`;
const IPV6_ROUTE = `fd000000000000000000000000000000 40 00000000000000000000000000000000 00 00000000000000000000000000000000 00000100 00000003 00000000 00000001     eth0
00000000000000000000000000000000 00 00000000000000000000000000000000 00 fd000000000000000000000000000001 00000400 00000002 00000000 00000003     eth0
00000000000000000000000000000001 80 00000000000000000000000000000000 00 00000000000000000000000000000000 00000000 00000004 00000000 80200001       lo
00000000000000000000000000000000 00 00000000000000000000000000000000 00 00000000000000000000000000000000 ffffffff 00000001 00000000 00200200       lo
`;

function routedBy(routes: { address: string; prefix: number }[], family: "ipv4" | "ipv6"): BlockList {
  const list = new BlockList();
  for (const r of routes) list.addSubnet(r.address, r.prefix, family);
  return list;
}

describe("routes", () => {
  test("the kernel's tables give their routes, without default and reject routes", () => {
    expect(ipv4Routes(ROUTE, true)).toEqual([{ address: "192.0.2.0", prefix: 24 }]);
    expect(ipv6Routes(IPV6_ROUTE)).toEqual([
      { address: "fd00:0000:0000:0000:0000:0000:0000:0000", prefix: 64 },
      { address: "0000:0000:0000:0000:0000:0000:0000:0001", prefix: 128 },
    ]);
    const routed = routedBy(ipv4Routes(ROUTE, true), "ipv4");
    expect(isRoutableFromHere("192.0.2.7", routed)).toBe(true);
    expect(isRoutableFromHere("10.77.0.11", routed)).toBe(false);
    expect(isRoutableFromHere("localhost", routed)).toBe(true);
  });

  test("the hint names the namespace when there is one, and lists them when there are several", () => {
    const routed = routedBy([{ address: "192.0.2.0", prefix: 24 }], "ipv4");
    expect(namespaceHint(["192.0.2.5"], { routed, namespaces: ["nodecore-1-dev"] })).toBeUndefined();
    expect(namespaceHint(["10.77.0.11", "10.77.0.11"], { routed, namespaces: ["nodecore-1-dev"] })).toBe(
      "10.77.0.11 is on no network this machine has a route to (other than a default route): if the cluster runs in a network namespace, run ctl there: ip netns exec nodecore-1-dev ctl ...",
    );
    expect(namespaceHint(["10.77.0.11", "10.77.0.12"], { routed, namespaces: ["a", "b"] })).toEndWith(
      "are on no network this machine has a route to (other than a default route): if the cluster runs in a network namespace, run ctl there: ip netns exec <namespace> ctl ... (namespaces here: a, b)",
    );
  });
});

describe("explain", () => {
  const routed = routedBy([{ address: "192.0.2.0", prefix: 24 }], "ipv4");
  const at = (host: string) => ({ host, port: 7835 });

  test("curators refused or unreached at addresses not routed here get the namespace hint; routed ones do not", () => {
    const outside = new NoCuratorError([{ endpoint: at("10.77.0.11"), kind: "refused", reason: "connection refused at 10.77.0.11:7835" }]);
    expect(curatorFailureLine(outside, { routed, namespaces: ["nodecore-1-dev"] })).toBe(
      "no curator answered (1 tried): 10.77.0.11:7835: connection refused at 10.77.0.11:7835; 10.77.0.11 is on no network this machine has a route to (other than a default route): if the cluster runs in a network namespace, run ctl there: ip netns exec nodecore-1-dev ctl ...",
    );
    const timedOut = new NoCuratorError([{ endpoint: at("10.77.0.11"), kind: "timeout", reason: "timed out: no connection within 3 s" }]);
    expect(curatorFailureLine(timedOut, { routed, namespaces: [] })).toContain("ip netns exec <namespace> ctl ...");
    const inside = new NoCuratorError([{ endpoint: at("192.0.2.9"), kind: "refused", reason: "connection refused at 192.0.2.9:7835" }]);
    expect(curatorFailureLine(inside, { routed, namespaces: ["nodecore-1-dev"] })).toBe(inside.message);
  });

  test("a call whose connection dropped says it may have been carried out, and that running it again is safe", () => {
    const err = new NoCuratorError([{ endpoint: at("192.0.2.9"), kind: "dropped", reason: "the connection dropped during the call (Connection dropped)" }]);
    expect(curatorFailureLine(err, { routed })).toBe(
      "no curator answered (1 tried): 192.0.2.9:7835: the connection dropped during the call (Connection dropped); a call that dropped or ran out of time may still have been carried out; running the same command again is safe",
    );
  });

  test("an untrusted curator points at the saved CA and at takeownership", () => {
    const err = new NoCuratorError([{ endpoint: at("192.0.2.9"), kind: "untrusted", reason: "its certificate is not signed by the cluster CA (unable to verify the first certificate)" }]);
    expect(curatorFailureLine(err, { files: configPaths("/home/o/.config/nodecore"), routed })).toEndWith(
      "; the curator's certificate is not trusted by the saved CA (/home/o/.config/nodecore/ca.crt), so these credentials are likely from an earlier launch of the cluster: run 'ctl takeownership <node address>' again",
    );
  });

  test("a file system error on the owner's own path names the path and what went wrong, in words", () => {
    const missing = Object.assign(new Error("ENOENT: no such file or directory, open '/home/o/pods.yaml'"), { code: "ENOENT", path: "/home/o/pods.yaml", syscall: "open" });
    expect(explain(missing)).toEqual({ line: "/home/o/pods.yaml: no such file or directory", exitStatus: 1 });
    const taken = Object.assign(new Error("EEXIST: file already exists, open '/home/o/owner.key'"), { code: "EEXIST", path: "/home/o/owner.key" });
    expect(explain(taken).line).toBe("/home/o/owner.key: already exists");
  });

  test("every error is one line; usage errors exit 2, the rest 1", () => {
    expect(explain(new UsageError("unknown command 'x'"))).toEqual({ line: "unknown command 'x'", exitStatus: 2 });
    expect(explain(new RpcError(Status.NOT_FOUND, "node x not found", "M/ApproveNode"))).toEqual({ line: "node x not found [NOT_FOUND]", exitStatus: 1 });
    expect(explain(new RpcError(Status.DEADLINE_EXCEEDED, "Deadline exceeded after 15.002s,LB pick: 0.001s", "M/GetNodes")).line).toBe("deadline exceeded: no answer within 15 s [DEADLINE_EXCEEDED]");
    expect(explain(new RpcError(Status.DEADLINE_EXCEEDED, "Deadline exceeded", "M/GetNodes")).line).toBe("deadline exceeded: no answer within the call's deadline (--timeout) [DEADLINE_EXCEEDED]");
    expect(explain(new Error("error:1E08010C:DECODER routines::unsupported\n  at somewhere")).line).toBe("error:1E08010C:DECODER routines::unsupported at somewhere");
    expect(explain("a string")).toEqual({ line: "a string", exitStatus: 1 });
  });
});
