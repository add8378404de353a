import { describe, expect, test } from "bun:test";
import { CORDONED_BY_ANNOTATION } from "./drain.ts";
import type { NodeSummary } from "./format.ts";
import type { KubernetesAnswer, OwnerKubernetes } from "./kubernetes_api.ts";
import { drainBeforeGoing, powerNode, previewDrain, type PowerAction, type PowerCalls, type PowerOptions } from "./node_power.ts";

// A stand-in apiserver with one Node and its pods, answering the few
// requests a drain and an uncordon make (the real one is exercised by
// test/kubernetes_controller_process.test.ts and the cluster e2e), and a
// stand-in node that "reboots" when asked.

interface FakePod {
  name: string;
  owner?: string;
  /** Its budget refuses every eviction. */
  budgeted?: boolean;
}

class FakeCluster {
  unschedulable = false;
  annotations: Record<string, string> = {};
  pods: FakePod[];
  /** What happened, in order: "cordon", "evict web", "power reboot", "uncordon". */
  events: string[] = [];
  bootMs = 1_000;
  heartbeatMs = 1_000;
  /** Node reads after the reboot until the kubelet's heartbeat is from the new boot. */
  staleReads = 1;
  powered?: PowerAction;

  constructor(pods: FakePod[]) {
    this.pods = pods;
  }

  api(): OwnerKubernetes {
    const answer = (status: number, body?: unknown): KubernetesAnswer => ({ status, body });
    return {
      apiservers: ["https://fake"],
      request: async (method, path, body) => {
        if (path === "/api/v1/nodes/n1" && method === "GET") {
          if (this.powered && this.staleReads-- <= 0) this.heartbeatMs = this.bootMs + 500;
          return answer(200, {
            metadata: { name: "n1", annotations: { ...this.annotations } },
            spec: this.unschedulable ? { unschedulable: true } : {},
            status: { conditions: [{ type: "Ready", status: "True", lastHeartbeatTime: new Date(this.heartbeatMs).toISOString() }] },
          });
        }
        if (path === "/api/v1/nodes/n1" && method === "PATCH") {
          const patch = body as { spec: { unschedulable: boolean | null }; metadata?: { annotations: Record<string, string | null> } };
          this.unschedulable = patch.spec.unschedulable === true;
          for (const [k, v] of Object.entries(patch.metadata?.annotations ?? {})) {
            if (v === null) delete this.annotations[k];
            else this.annotations[k] = v;
          }
          this.events.push(this.unschedulable ? "cordon" : "uncordon");
          return answer(200, {});
        }
        if (path.startsWith("/api/v1/pods?") && method === "GET") {
          return answer(200, {
            items: this.pods.map((p) => ({
              metadata: { name: p.name, namespace: "apps", uid: `uid-${p.name}`, ...(p.owner ? { ownerReferences: [{ kind: p.owner, name: "o", controller: true }] } : {}) },
              status: { phase: "Running" },
            })),
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

  calls(reachable = true): PowerCalls {
    return {
      kubernetes: async () => {
        if (!reachable) throw new Error("no UP node holds both the kubernetes-controller and the consensus role: there is no apiserver to ask");
        return this.api();
      },
      power: async (_id, action) => {
        this.powered = action;
        this.events.push(`power ${action}`);
      },
      waitRebooted: async (id) => {
        this.bootMs = Date.now();
        this.events.push("back");
        return node({ id, health: "HEALTHY", bootMs: this.bootMs });
      },
    };
  }
}

function node(fields: Partial<NodeSummary> = {}): NodeSummary {
  return { id: "n1", state: "UP", address: "10.0.0.2", roles: ["kubernetes-worker"], curator: false, labels: [], health: "HEALTHY", services: [], bootMs: 1_000, ...fields } as NodeSummary;
}

const options = (o: Partial<PowerOptions> = {}): PowerOptions => ({ drain: true, drainTimeoutMs: 30_000, force: false, wait: false, kubernetesRuns: true, ...o });

function sayer() {
  const notes: string[] = [];
  return { notes, say: { note: (l: string) => notes.push(l) } };
}

describe("a node's reboot and power-off, drained first", () => {
  test(
    "a worker's reboot: cordoned with the command's mark, its Deployment's pod evicted, bare and DaemonSet pods left, then rebooted, waited for, and uncordoned once its kubelet is heard from the new boot",
    async () => {
      const cluster = new FakeCluster([{ name: "web", owner: "ReplicaSet" }, { name: "solo" }, { name: "agent", owner: "DaemonSet" }]);
      let markAtPower: string | undefined;
      const calls = cluster.calls();
      const power = calls.power;
      calls.power = async (id, action) => {
        markAtPower = cluster.annotations[CORDONED_BY_ANNOTATION];
        await power(id, action);
      };
      const { say } = sayer();
      const result = await powerNode(calls, node(), "reboot", options(), say);
      expect(cluster.events).toEqual(["cordon", "evict web", "power reboot", "back", "uncordon"]);
      expect(markAtPower).toMatch(/^ctl node reboot at \d{4}-/);
      expect(cluster.unschedulable).toBe(false);
      expect(cluster.annotations[CORDONED_BY_ANNOTATION]).toBeUndefined();
      expect(result.drained?.evicted).toEqual(["apps/web"]);
      expect(result.drained?.stayed.map((s) => s.pod)).toEqual(["apps/solo", "apps/agent"]);
      expect(result.uncordoned).toBe(true);
      expect(result.health).toBe("HEALTHY");
      // The stale Ready (from before the reboot) was read once and not believed.
      expect(cluster.staleReads).toBeLessThan(0);
    },
    { timeout: 20_000 },
  );

  test("a budget that allows no disruption stops it before the node is touched: the pod named, the Node uncordoned", async () => {
    const cluster = new FakeCluster([{ name: "db", owner: "StatefulSet", budgeted: true }]);
    const error = await powerNode(cluster.calls(), node(), "reboot", options({ drainTimeoutMs: 1_000 }), sayer().say).catch((e: Error) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as Error).message).toMatch(
      /^drain of n1 stopped after [\d.]+ s: apps\/db could not be evicted \(Cannot evict pod as it would violate the pod's disruption budget\.\); n1 was not rebooted and it was uncordoned \(a longer --drain-timeout waits longer for the budget\)$/,
    );
    expect(cluster.powered).toBeUndefined();
    expect(cluster.unschedulable).toBe(false);
    expect(cluster.annotations[CORDONED_BY_ANNOTATION]).toBeUndefined();
  });

  test(
    "an operator's own cordon stays cordoned after the reboot; a cordon an interrupted reboot left (its mark) is taken back by the next",
    async () => {
      const operators = new FakeCluster([{ name: "web", owner: "ReplicaSet" }]);
      operators.unschedulable = true;
      const kept = await powerNode(operators.calls(), node(), "reboot", options(), sayer().say);
      expect(kept.uncordoned).toBeUndefined();
      expect(operators.unschedulable).toBe(true);
      expect(operators.events).toEqual(["cordon", "evict web", "power reboot"]);

      const interrupted = new FakeCluster([]);
      interrupted.unschedulable = true;
      interrupted.annotations[CORDONED_BY_ANNOTATION] = "ctl node reboot at 2026-11-29T05:00:00.000Z";
      const again = await powerNode(interrupted.calls(), node(), "reboot", options(), sayer().say);
      expect(again.uncordoned).toBe(true);
      expect(interrupted.unschedulable).toBe(false);
    },
    { timeout: 20_000 },
  );

  test("a power-off drains and leaves its Node cordoned, and says how to take that back", async () => {
    const cluster = new FakeCluster([{ name: "web", owner: "ReplicaSet" }]);
    const { notes, say } = sayer();
    const result = await powerNode(cluster.calls(), node(), "poweroff", options(), say);
    expect(cluster.events).toEqual(["cordon", "evict web", "power poweroff"]);
    expect(cluster.unschedulable).toBe(true);
    expect(result.seconds).toBeUndefined();
    expect(notes.at(-1)).toBe("n1 stays cordoned while it is off; the cluster uncordons it once it is on again and its Node Ready (or: ctl node uncordon n1)");
  });

  test("--no-drain, a node that is not a worker, a cluster without Kubernetes, and one whose apiserver does not answer", async () => {
    const noDrain = new FakeCluster([{ name: "web", owner: "ReplicaSet" }]);
    const { notes, say } = sayer();
    let asked = false;
    const calls = noDrain.calls();
    calls.kubernetes = async () => ((asked = true), noDrain.api());
    await powerNode(calls, node(), "reboot", options({ drain: false }), say);
    expect([asked, noDrain.events]).toEqual([false, ["power reboot"]]);
    expect(notes).toEqual(["--no-drain: n1's pods stop with it, without their PodDisruptionBudgets being asked, and nothing moves them elsewhere first"]);

    const consensusOnly = new FakeCluster([]);
    const plain = await powerNode(consensusOnly.calls(false), node({ roles: ["consensus"] }), "reboot", options(), sayer().say);
    expect([plain.drained, plain.seconds, consensusOnly.events]).toEqual([undefined, undefined, ["power reboot"]]);
    const waited = await powerNode(consensusOnly.calls(false), node({ roles: ["consensus"] }), "reboot", options({ wait: true }), sayer().say);
    expect(waited.health).toBe("HEALTHY");

    // No node holds the kubernetes-controller role: no Kubernetes runs, nothing to drain, and none is asked.
    const noKubernetes = new FakeCluster([{ name: "web", owner: "ReplicaSet" }]);
    const plainWorker = await powerNode(noKubernetes.calls(false), node(), "reboot", options({ kubernetesRuns: false }), sayer().say);
    expect([plainWorker.drained, noKubernetes.events]).toEqual([undefined, ["power reboot"]]);

    const headless = new FakeCluster([]);
    const error = await powerNode(headless.calls(false), node(), "reboot", options(), sayer().say).catch((e: Error) => e);
    expect((error as Error).message).toBe(
      "cannot drain n1 before it is rebooted: no UP node holds both the kubernetes-controller and the consensus role: there is no apiserver to ask; nothing was changed (--no-drain reboots it without draining)",
    );
    expect(headless.events).toEqual([]);
  });

  test("a reset's drain evicts bare pods too (they go with the node either way), under the reset's mark", async () => {
    const cluster = new FakeCluster([{ name: "web", owner: "ReplicaSet" }, { name: "solo" }]);
    const drained = await drainBeforeGoing(async () => cluster.api(), node(), "reset", { drain: true, drainTimeoutMs: 30_000, force: true, kubernetesRuns: true }, sayer().say);
    expect(drained?.result.evicted).toEqual(["apps/web", "apps/solo"]);
    expect(cluster.annotations[CORDONED_BY_ANNOTATION]).toMatch(/^ctl node reset at /);
  });

  test("the dry run's preview evicts and leaves what the drain would, and changes nothing", async () => {
    const cluster = new FakeCluster([{ name: "web", owner: "ReplicaSet" }, { name: "solo" }, { name: "agent", owner: "DaemonSet" }]);
    expect(await previewDrain(cluster.api(), "n1", false)).toEqual({ evict: ["apps/web"], stay: ["apps/solo", "apps/agent"] });
    expect(await previewDrain(cluster.api(), "n1", true)).toEqual({ evict: ["apps/web", "apps/solo"], stay: ["apps/agent"] });
    expect([cluster.events, cluster.unschedulable, cluster.pods.length]).toEqual([[], false, 3]);
  });
});
