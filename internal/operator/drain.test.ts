import { describe, expect, test } from "bun:test";
import { drainPlan, type DrainPod } from "./drain.ts";

const pod = (name: string, extra: { owner?: string; mirror?: boolean; phase?: string } = {}): DrainPod => ({
  metadata: {
    name,
    namespace: "apps",
    uid: `uid-${name}`,
    ...(extra.owner ? { ownerReferences: [{ kind: extra.owner, name: `${name}-owner`, controller: true }] } : {}),
    ...(extra.mirror ? { annotations: { "kubernetes.io/config.mirror": "abc" } } : {}),
  },
  status: { phase: extra.phase ?? "Running" },
});

describe("what a drain evicts", () => {
  test("a controller's pods go; a DaemonSet's, a static and a finished pod stay, each saying why", () => {
    const plan = drainPlan([
      pod("web", { owner: "ReplicaSet" }),
      pod("db-0", { owner: "StatefulSet" }),
      pod("agent", { owner: "DaemonSet" }),
      pod("etcd", { owner: "Node", mirror: true }),
      pod("job", { owner: "Job", phase: "Succeeded" }),
    ]);
    expect(plan.evict.map((p) => p.name)).toEqual(["web", "db-0"]);
    expect(plan.stay.map((s) => [s.pod.name, s.why])).toEqual([
      ["agent", "DaemonSet agent-owner's pod (it runs on every node)"],
      ["etcd", "a static pod (its kubelet keeps it)"],
      ["job", "finished (Succeeded)"],
    ]);
    expect(plan.refuse).toEqual([]);
  });

  test("a bare pod, which nothing would make again, is refused unless forced", () => {
    const pods = [pod("web", { owner: "ReplicaSet" }), pod("scratch")];
    expect(drainPlan(pods)).toEqual({ evict: [{ namespace: "apps", name: "web", uid: "uid-web" }], stay: [], refuse: [{ namespace: "apps", name: "scratch", uid: "uid-scratch" }] });
    expect(drainPlan(pods, true).evict.map((p) => p.name)).toEqual(["web", "scratch"]);
    // A finished bare pod holds nothing: it stays, forced or not.
    expect(drainPlan([pod("done", { phase: "Failed" })]).refuse).toEqual([]);
  });

  test("around a reboot a bare pod stays on its node (its kubelet runs it again there), unless forced", () => {
    const pods = [pod("web", { owner: "ReplicaSet" }), pod("scratch")];
    const plan = drainPlan(pods, false, "stay");
    expect([plan.evict.map((p) => p.name), plan.refuse, plan.stay.map((s) => [s.pod.name, s.why])]).toEqual([
      ["web"],
      [],
      [["scratch", "a bare pod (no controller would make it again elsewhere): its kubelet runs it again when the node is back"]],
    ]);
    expect(drainPlan(pods, true, "stay").evict.map((p) => p.name)).toEqual(["web", "scratch"]);
  });

  test("a pod without a name or namespace is passed over", () => {
    expect(drainPlan([{ metadata: { name: "x" } }, {}])).toEqual({ evict: [], stay: [], refuse: [] });
  });
});
