// A cluster update's rollout against stand-ins: a stand-in apiserver with
// the workers' Nodes and their pods (answering what a drain, a readiness
// wait and an uncordon ask), and stand-in nodes that "update" when asked.
// The real apiserver's drains are in test/kubernetes_controller_process.test.ts,
// a real rollout of VMs in the cluster e2e (--long) and bench/update_qemu.ts.

import { describe, expect, test } from "bun:test";
import { rollOut, type ClusterUpdateCalls, type ClusterUpdateOptions } from "./cluster_update.ts";
import type { NodeSummary } from "./format.ts";
import type { KubernetesAnswer, OwnerKubernetes } from "./kubernetes_api.ts";
import type { Bundle } from "./update.ts";

interface StandInPod {
  name: string;
  node: string;
  owner: string;
  /** Its budget refuses every eviction. */
  budgeted?: boolean;
}

class StandInCluster {
  nodes: NodeSummary[];
  pods: StandInPod[];
  unschedulable = new Set<string>();
  /** What happened, in order: "update c", "cordon w1", "evict web-1", "uncordon w1". */
  events: string[] = [];

  constructor(nodes: NodeSummary[], pods: StandInPod[]) {
    this.nodes = nodes;
    this.pods = pods;
  }

  api(): OwnerKubernetes {
    const answer = (status: number, body?: unknown): KubernetesAnswer => ({ status, body });
    return {
      apiservers: ["https://stand-in"],
      request: async (method, path, body) => {
        if (path === "/api/v1/nodes" && method === "GET") {
          const workers = this.nodes.filter((n) => n.roles.includes("kubernetes-worker"));
          return answer(200, { items: workers.map((n) => ({ metadata: { name: n.id }, status: { conditions: [{ type: "Ready", status: "True" }] } })) });
        }
        const node = /^\/api\/v1\/nodes\/([^/]+)$/.exec(path);
        if (node) {
          const id = node[1]!;
          if (method === "GET") {
            // Ready, its kubelet's heartbeat newer than any boot so far.
            const spec = this.unschedulable.has(id) ? { unschedulable: true } : {};
            return answer(200, {
              metadata: { name: id, annotations: {} },
              spec,
              status: { conditions: [{ type: "Ready", status: "True", lastHeartbeatTime: new Date(Date.now() + 1_000).toISOString() }] },
            });
          }
          if (method === "PATCH") {
            const cordon = (body as { spec: { unschedulable: boolean | null } }).spec.unschedulable === true;
            if (cordon) this.unschedulable.add(id);
            else this.unschedulable.delete(id);
            this.events.push(`${cordon ? "cordon" : "uncordon"} ${id}`);
            return answer(200, {});
          }
        }
        if (path.startsWith("/api/v1/pods?") && method === "GET") {
          const on = decodeURIComponent(path).split("spec.nodeName=")[1];
          return answer(200, {
            items: this.pods
              .filter((p) => p.node === on)
              .map((p) => ({ metadata: { name: p.name, namespace: "apps", uid: `uid-${p.name}`, ownerReferences: [{ kind: p.owner, name: "o", controller: true }] }, status: { phase: "Running" } })),
          });
        }
        const pod = /^\/api\/v1\/namespaces\/apps\/pods\/([^/]+)(\/eviction)?$/.exec(path);
        if (pod) {
          const found = this.pods.find((p) => p.name === pod[1]);
          if (!found) return answer(404, { message: "not found" });
          if (method === "GET") return answer(200, { metadata: { uid: `uid-${found.name}` } });
          if (found.budgeted) return answer(429, { message: "Cannot evict pod as it would violate the pod's disruption budget." });
          this.pods = this.pods.filter((p) => p !== found);
          this.events.push(`evict ${found.name}`);
          return answer(201, {});
        }
        return answer(404, { message: `no ${method} ${path} here` });
      },
    };
  }

  calls(): ClusterUpdateCalls {
    return {
      listNodes: async () => this.nodes.map((n) => ({ ...n })),
      kubernetes: async () => this.api(),
      updateNode: async (id) => {
        this.events.push(`update ${id}`);
        const bootMs = Date.now();
        this.nodes = this.nodes.map((n) => (n.id === id ? { ...n, version: VERSION, bootMs } : n));
        return { node: id, slot: "b", version: VERSION, activated: true, seconds: 1, bootMs };
      },
    };
  }
}

const VERSION = "0.2.0";
const bundle = { dir: "/b", text: "{}", manifest: { format: 1, version: VERSION, arch: "x86_64", files: {} } } as unknown as Bundle;

function node(id: string, roles: string[]): NodeSummary {
  return { id, state: "UP", address: "10.0.0.1", roles, curator: false, labels: [], health: "HEALTHY", version: "0.1.0", services: [], bootMs: 1_000 } as NodeSummary;
}

const options = (o: Partial<ClusterUpdateOptions> = {}): ClusterUpdateOptions => ({ maxUnavailable: 1, force: false, allowDowngrade: false, drain: true, drainTimeoutMs: 1_000, ...o });

function sayer() {
  const notes: string[] = [];
  return { notes, say: { note: (l: string) => notes.push(l), progress: () => {} } };
}

/** A controller (no kubelet) and two workers, one pod of a ReplicaSet on each worker. */
const cluster = (budgetedOnW1 = false) =>
  new StandInCluster(
    [node("w2", ["kubernetes-worker"]), node("c", ["consensus", "kubernetes-controller"]), node("w1", ["kubernetes-worker"])],
    [
      { name: "web-1", node: "w1", owner: "ReplicaSet" },
      { name: "web-2", node: "w2", owner: "ReplicaSet" },
      ...(budgetedOnW1 ? [{ name: "db-0", node: "w1", owner: "StatefulSet", budgeted: true }] : []),
    ],
  );

describe("a cluster update's rollout", () => {
  test("the controller first, then each worker drained, updated and uncordoned in turn", async () => {
    const c = cluster();
    const { say } = sayer();
    const result = await rollOut(c.calls(), bundle, options(), say);
    expect(c.events).toEqual(["update c", "cordon w1", "evict web-1", "update w1", "uncordon w1", "cordon w2", "evict web-2", "update w2", "uncordon w2"]);
    expect(result.steps.map((s) => [s.node, s.outcome, s.evicted ?? null])).toEqual([
      ["c", "updated", null],
      ["w1", "updated", ["apps/web-1"]],
      ["w2", "updated", ["apps/web-2"]],
    ]);
  });

  test("a budget that allows no disruption stops the update at its node, naming the pod: that node is uncordoned and not updated, and the nodes after it are not touched", async () => {
    const c = cluster(true);
    const { say } = sayer();
    const rolled = rollOut(c.calls(), bundle, options(), say);
    await expect(rolled).rejects.toThrow(/^stopped at w1: .*apps\/db-0.*disruption budget.*; w1 was not updated and it was uncordoned/);
    // web-1 went before the budget refused db-0; the drain does not put it back.
    expect(c.events).toEqual(["update c", "cordon w1", "evict web-1", "uncordon w1"]);
    expect(c.nodes.find((n) => n.id === "w2")!.version).toBe("0.1.0");
    expect(c.unschedulable.size).toBe(0);
  });

  test("a node that never comes back stops the update, naming it: it stays cordoned for the operator, the nodes after it are not touched", async () => {
    const c = cluster();
    const calls = c.calls();
    const update = calls.updateNode;
    calls.updateNode = async (id, o) => {
      if (id !== "w1") return update(id, o);
      c.events.push("update w1");
      throw new Error("w1 did not come back within 300 s");
    };
    const { say } = sayer();
    await expect(rollOut(calls, bundle, options(), say)).rejects.toThrow("stopped at w1: w1 did not come back within 300 s (it stays cordoned: once it is back, ctl node uncordon w1)");
    expect(c.events).toEqual(["update c", "cordon w1", "evict web-1", "update w1"]);
    expect([...c.unschedulable]).toEqual(["w1"]);
    expect(c.nodes.find((n) => n.id === "w2")!.version).toBe("0.1.0");
  });

  test("--no-drain updates the workers with their pods on them, and says what that risks", async () => {
    const c = cluster(true);
    const { notes, say } = sayer();
    await rollOut(c.calls(), bundle, options({ drain: false }), say);
    expect(c.events).toEqual(["update c", "update w1", "update w2"]);
    expect(notes.filter((n) => n.startsWith("--no-drain"))).toHaveLength(2);
  });
});
