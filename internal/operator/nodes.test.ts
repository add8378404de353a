import { describe, expect, test } from "bun:test";
import { FilterError, filterNodes, type NodeSummary } from "./format.ts";
import { askPatiently, resolveNode } from "./nodes.ts";
import { NoCuratorError, type CuratorFailure } from "../curator/client/mod.ts";
import { OperatorError } from "./config_dir.ts";

const node = (id: string, labels: string[] = []): NodeSummary => ({ id, state: "UP", address: "", roles: [], curator: false, labels, health: "HEALTHY", services: [] });
const nodes = [node("node-91905a8be1dd2a13", ["name=node1"]), node("node-9190aaaaaaaaaaaa", ["name=node2"]), node("node-0c0ffee000000000")];

describe("the node the owner means", () => {
  test("a whole ID, a unique prefix (with or without node-), or a name label", () => {
    expect(resolveNode(nodes, "node-0c0ffee000000000")).toBe("node-0c0ffee000000000");
    expect(resolveNode(nodes, "node-0c")).toBe("node-0c0ffee000000000");
    expect(resolveNode(nodes, "0c0f")).toBe("node-0c0ffee000000000");
    expect(resolveNode(nodes, "91905")).toBe("node-91905a8be1dd2a13");
    expect(resolveNode(nodes, "node2")).toBe("node-9190aaaaaaaaaaaa");
  });

  test("an ambiguous prefix names the candidates; an unknown one names the nodes there are", () => {
    expect(() => resolveNode(nodes, "9190")).toThrow("'9190' matches 2 nodes (node-91905a8be1dd2a13, node-9190aaaaaaaaaaaa); type more of the ID");
    expect(() => resolveNode(nodes, "zz")).toThrow("the cluster has no node 'zz' (nodes: node-91905a8be1dd2a13 (node1), node-9190aaaaaaaaaaaa (node2), node-0c0ffee000000000)");
    expect(() => resolveNode(nodes, "")).toThrow("the cluster has no node ''");
  });
});

describe("ctl node list --filter", () => {
  const n = (id: string, extra: Partial<NodeSummary>): NodeSummary => ({ id, state: "UP", address: "", roles: [], curator: false, labels: [], health: "HEALTHY", services: [], ...extra });
  const nodes = [
    n("node-a", { roles: ["consensus"], labels: ["zone=a", "name=node1"] }),
    n("node-b", { roles: ["kubernetes-worker"], labels: ["zone=b"], health: "DEGRADED" }),
    n("node-c", { state: "STANDBY", labels: [] }),
  ];
  const ids = (expression: string) => filterNodes(nodes, expression).map((x) => x.id);

  test("state, role, health and labels; every term must hold", () => {
    expect(ids("state=UP")).toEqual(["node-a", "node-b"]);
    expect(ids("state=standby")).toEqual(["node-c"]);
    expect(ids("role=consensus")).toEqual(["node-a"]);
    expect(ids("health=degraded")).toEqual(["node-b"]);
    expect(ids("zone=b")).toEqual(["node-b"]);
    expect(ids("zone")).toEqual(["node-a", "node-b"]);
    expect(ids("zone, state=UP,role=kubernetes-worker")).toEqual(["node-b"]);
    expect(ids("zone=c")).toEqual([]);
  });

  test("a term that is none is refused in one line", () => {
    for (const bad of ["", "=a", "zone=a,", "a b=c", "\u0000=1"]) {
      expect(() => filterNodes(nodes, bad)).toThrow(FilterError);
      try {
        filterNodes(nodes, bad);
      } catch (err) {
        expect((err as Error).message.split("\n")).toHaveLength(1);
      }
    }
  });
});

describe("a read asked again while no curator answers", () => {
  const endpoint = { nodeId: "node-06ef88180d876325", host: "10.77.3.11", port: 7835 };
  const noAnswer = (kind: CuratorFailure["kind"]) => new OperatorError("no curator answered", { cause: new NoCuratorError([{ endpoint, kind, reason: kind }]) });

  test("is asked again after a dropped call or a leader change, and its answer returned", async () => {
    const failures = [noAnswer("dropped"), noAnswer("unavailable")];
    const said: string[] = [];
    let calls = 0;
    const answer = await askPatiently(
      async () => {
        calls++;
        const failure = failures.shift();
        if (failure) throw failure;
        return "listed";
      },
      { retryMs: 1, progress: (line) => said.push(line) },
    );
    expect([answer, calls, said.length]).toEqual(["listed", 3, 2]);
    expect(said[0]).toMatch(/^the cluster did not answer \(no curator answered\); asking again$/);
  });

  test("is not asked again when a curator cannot be trusted, or answered with a refusal", async () => {
    let calls = 0;
    await expect(askPatiently(async () => (calls++, Promise.reject(noAnswer("untrusted"))), { retryMs: 1 })).rejects.toThrow("no curator answered");
    await expect(askPatiently(async () => (calls++, Promise.reject(new OperatorError("the cluster has no node x"))), { retryMs: 1 })).rejects.toThrow("the cluster has no node x");
    expect(calls).toBe(2);
  });

  test("gives up once its patience runs out, with the last failure", async () => {
    let calls = 0;
    await expect(askPatiently(async () => (calls++, Promise.reject(noAnswer("deadline"))), { patienceMs: 30, retryMs: 5 })).rejects.toThrow("no curator answered");
    expect(calls).toBeGreaterThan(1);
  });
});
