import { describe, expect, test } from "bun:test";
import { FilterError, filterNodes, type NodeSummary } from "./format.ts";
import { resolveNode } from "./nodes.ts";

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
