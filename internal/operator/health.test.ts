// The cluster health verdict's rules, as a table: a healthy three-node
// cluster, and one thing wrong at a time, each failing its own check with
// the reason an operator reads.

import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { BackupScheduleSchema, BackupStatusSchema, BackupTakenSchema } from "../../proto/gen/api/management_pb.ts";
import type { NodeSummary } from "./format.ts";
import { clusterHealth, healthTable, type ClusterHealthInputs } from "./health.ts";

const NOW = 1_800_000_000_000;
const node = (id: string, extra: Partial<NodeSummary> = {}): NodeSummary => ({
  id,
  state: "UP",
  address: "10.0.0.1",
  roles: ["consensus"],
  curator: true,
  labels: [],
  health: "HEALTHY",
  lastSeenMs: 1_000,
  clockOffsetMs: 12,
  services: [],
  ...extra,
});

function healthy(): ClusterHealthInputs {
  return {
    nodes: [node("node-a"), node("node-b"), node("node-c", { roles: ["consensus", "kubernetes-worker"], clockOffsetMs: -340 })],
    curatorLeader: "node-a",
    etcd: { members: ["node-a", "node-b", "node-c"].map((name, i) => ({ id: `${i + 1}f`, name, isLearner: false })) },
    backups: {
      schedule: create(BackupScheduleSchema, { everyMinutes: 60, keep: 7, nodeId: "node-a" }),
      status: create(BackupStatusSchema, { nodeId: "node-a", lastVerified: create(BackupTakenSchema, { timeMs: BigInt(NOW - 30 * 60_000), file: "/data/backups/x.backup" }) }),
    },
    kubernetes: { ready: new Map([["node-c", true]]) },
    manifests: { stored: [{ name: "web", sha256: "a1" }], statuses: new Map([["web", { sha256: "a1", applied: 2, objects: 2, node: "node-a", atMs: NOW }]]) },
    nowMs: NOW,
  };
}

/** The failing checks and their details. */
function failing(inputs: ClusterHealthInputs): Record<string, string> {
  const verdict = clusterHealth(inputs);
  expect(verdict.healthy).toBe(verdict.checks.every((c) => c.ok));
  return Object.fromEntries(verdict.checks.filter((c) => !c.ok).map((c) => [c.name, c.detail]));
}

describe("the cluster health verdict", () => {
  test("a healthy cluster passes every check, and says what it found", () => {
    const verdict = clusterHealth(healthy());
    expect(verdict.healthy).toBe(true);
    expect(verdict.checks.map((c) => c.name)).toEqual(["nodes", "clocks", "consensus", "curator", "backups", "kubernetes", "manifests"]);
    expect(Object.fromEntries(verdict.checks.map((c) => [c.name, c.detail]))).toEqual({
      nodes: "3 UP, every one heard from and none failing",
      clocks: "3 known, the furthest 340 ms behind the curator leader's (node-c)",
      consensus: "3 voting members, one for each consensus node, no learner",
      curator: "node-a leads",
      backups: "the last proven backup is 30m00s old (every 60 min)",
      kubernetes: "1 worker, every Node Ready",
      manifests: "1 stored, every one applied",
    });
    expect(healthTable(verdict).split("\n").at(-1)).toBe("cluster: healthy");
  });

  test("a cordoned Node is named, with how long and by which command when a drain marked it, and does not fail the check", () => {
    const inputs = healthy();
    inputs.nodes.push(node("node-d", { roles: ["kubernetes-worker"] }));
    inputs.kubernetes = {
      ready: new Map([
        ["node-c", true],
        ["node-d", true],
      ]),
      cordoned: new Map([
        ["node-c", `ctl node reboot at ${new Date(NOW - 250_000).toISOString()}`],
        ["node-d", undefined],
      ]),
    };
    const check = clusterHealth(inputs).checks.find((c) => c.name === "kubernetes")!;
    expect(check).toEqual({
      name: "kubernetes",
      ok: true,
      detail: "2 workers, every Node Ready; cordoned: node-c for 4m10s, by ctl node reboot, node-d (by an operator; since when is not recorded)",
    });
  });

  const cases: { name: string; change: (i: ClusterHealthInputs) => void; fails: Record<string, string> }[] = [
    {
      name: "a node not heard from",
      change: (i) => (i.nodes[1] = node("node-b", { health: "HEARTBEAT_TIMEOUT", lastSeenMs: 95_000 })),
      fails: { nodes: "node-b is HEARTBEAT_TIMEOUT (last heard 1m35s ago)" },
    },
    {
      name: "a node whose service keeps failing",
      change: (i) => (i.nodes[1] = node("node-b", { health: "DEGRADED", healthReason: "root.roleserve.controlplane keeps failing (4 restarts)" })),
      fails: { nodes: "node-b is DEGRADED (root.roleserve.controlplane keeps failing (4 restarts))" },
    },
    {
      name: "a node whose clock is off",
      change: (i) =>
        (i.nodes[2] = node("node-c", {
          roles: ["consensus", "kubernetes-worker"],
          health: "CLOCK_SKEW",
          healthReason: "its clock is 7200.0 s behind the curator leader's (at most 10 s allowed)",
          clockOffsetMs: -7_200_000,
        })),
      fails: { clocks: "node-c: its clock is 7200.0 s behind the curator leader's (at most 10 s allowed)" },
    },
    {
      name: "no node UP",
      change: (i) => (i.nodes = i.nodes.map((n) => ({ ...n, state: "STANDBY" }))),
      fails: { nodes: "no node is UP; 3 waiting for approval" },
    },
    {
      name: "a learner that stays",
      change: (i) => (i.etcd = { members: [...("members" in i.etcd ? i.etcd.members : []), { id: "9a", name: "node-d", isLearner: true }] }),
      fails: { consensus: "member 9a (node-d) is still a learner" },
    },
    {
      name: "a member that never started",
      change: (i) => (i.etcd = { members: [...("members" in i.etcd ? i.etcd.members : []), { id: "9b", name: "", isLearner: false }] }),
      fails: { consensus: "member 9b never started" },
    },
    {
      name: "a consensus node without a member, and a member without the role",
      change: (i) =>
        (i.etcd = {
          members: [
            { id: "1f", name: "node-a", isLearner: false },
            { id: "2f", name: "node-b", isLearner: false },
            { id: "7f", name: "node-x", isLearner: false },
          ],
        }),
      fails: { consensus: "node-c holds the consensus role but is no voting member; member node-x votes, but no node holds its consensus role" },
    },
    {
      name: "etcd's members not listed",
      change: (i) => (i.etcd = { error: "etcdserver: request timed out" }),
      fails: { consensus: "etcd's members could not be listed: etcdserver: request timed out" },
    },
    { name: "no curator leader", change: (i) => (i.curatorLeader = ""), fails: { curator: "no curator leads" } },
    {
      name: "a failed backup",
      change: (i) =>
        (i.backups.status = create(BackupStatusSchema, {
          ...i.backups.status!,
          lastError: "the backup target https://s.example/b/x.backup answered HTTP 507 Insufficient Storage (the target is full)",
        })),
      fails: { backups: "the last attempt failed: the backup target https://s.example/b/x.backup answered HTTP 507 Insufficient Storage (the target is full)" },
    },
    {
      name: "an overdue backup",
      change: (i) => (i.backups.status!.lastVerified!.timeMs = BigInt(NOW - 3 * 3600_000)),
      fails: { backups: "the last proven backup is 3h00m old (every 60 min by node-a)" },
    },
    {
      name: "no proven backup yet",
      change: (i) => (i.backups.status = undefined),
      fails: { backups: "no backup proven to restore yet (every 60 min by node-a)" },
    },
    { name: "a worker whose Node is not Ready", change: (i) => (i.kubernetes = { ready: new Map([["node-c", false]]) }), fails: { kubernetes: "node-c is not Ready" } },
    { name: "a worker without a Node", change: (i) => (i.kubernetes = { ready: new Map() }), fails: { kubernetes: "node-c has no Node" } },
    {
      name: "no apiserver answering",
      change: (i) => (i.kubernetes = { error: "no apiserver answered (https://10.0.0.1:6443: connection refused)" }),
      fails: { kubernetes: "the workers' Nodes could not be read: no apiserver answered (https://10.0.0.1:6443: connection refused)" },
    },
  ];
  for (const c of cases) {
    test(`${c.name} fails its check, and only it`, () => {
      const inputs = healthy();
      c.change(inputs);
      expect(failing(inputs)).toEqual(c.fails);
      expect(healthTable(clusterHealth(inputs)).split("\n").at(-1)).toBe(`cluster: degraded (${Object.keys(c.fails).join(", ")})`);
    });
  }

  test("an add-on manifest that failed, or whose stored version no controller has applied yet, fails the manifests check, naming it and why", () => {
    const inputs = healthy();
    inputs.manifests = {
      stored: [
        { name: "db", sha256: "b2" },
        { name: "web", sha256: "a2" },
        { name: "new", sha256: "c3" },
      ],
      statuses: new Map([
        ["db", { sha256: "b2", applied: 1, objects: 3, error: 'Deployment db/main: namespaces "db" not found', node: "node-a", atMs: NOW }],
        ["web", { sha256: "a1", applied: 2, objects: 2, node: "node-a", atMs: NOW }],
      ]),
    };
    expect(failing(inputs)).toEqual({ manifests: 'db: 1 of 3 objects applied; Deployment db/main: namespaces "db" not found; web: not applied yet; new: not applied yet' });
    inputs.manifests = { error: "their status: the apiserver did not answer" };
    expect(failing(inputs)).toEqual({ manifests: "could not be read: their status: the apiserver did not answer" });
  });

  test("what is not there is not judged: no schedule, no worker, no offset yet", () => {
    const inputs = healthy();
    inputs.backups = {};
    inputs.nodes = inputs.nodes.map(({ clockOffsetMs: _, ...n }) => ({ ...n, roles: ["consensus"] }));
    inputs.kubernetes = undefined;
    inputs.manifests = { stored: [{ name: "web", sha256: "a1" }] };
    const verdict = clusterHealth(inputs);
    expect(verdict.healthy).toBe(true);
    const detail = Object.fromEntries(verdict.checks.map((c) => [c.name, c.detail]));
    expect(detail.backups).toBe("none scheduled (not judged)");
    expect(detail.kubernetes).toBe("no worker is UP (not judged)");
    expect(detail.clocks).toBe("no offset known yet (heartbeats say their time)");
    expect(detail.manifests).toBe("1 stored; no Kubernetes controller is UP to apply them yet (not judged)");
    inputs.manifests = { stored: [] };
    expect(Object.fromEntries(clusterHealth(inputs).checks.map((c) => [c.name, c.detail])).manifests).toBe("none stored (not judged)");
  });
});
