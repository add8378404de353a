// `ctl cluster health`: one verdict for the whole cluster, from what the
// curator leader and the nodes say, with each check named and why it fails.
//
//   GetClusterInfo ─▶ curator leader, etcd's members, scheduled backups
//   GetNodes       ─▶ each node's state, health (heartbeats, its failing
//                     services, its clock) and roles
//   the Kubernetes API (only while a worker is UP) ─▶ each worker's Node Ready
//   ListManifests, and (while a controller is UP) the controllers' status of
//                     them (kube-system/nodecore-manifests) ─▶ each one applied
//        │
//        ▼  clusterHealth(): pure rules, a table test (health.test.ts)
//   nodes · clocks · consensus · curator · backups · kubernetes · manifests
//        │
//        ▼
//   exit 0 healthy · 1 degraded (a check failed) · 2 unreachable (no curator answered)
//
// `--wait` asks again until every check passes or the time is up: scripts
// and the launcher wait on it.

import { Management, type BackupSchedule, type BackupStatus } from "../../proto/gen/api/management_pb.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { CORDONED_BY_ANNOTATION, MANIFESTS_STATUS, parseCordonMark, parseManifestsStatus, type ManifestStatus } from "../kubernetes/mod.ts";
import { ownerKubernetes, statusMessage, type OwnerKubernetes } from "./kubernetes_api.ts";
import { withFailover } from "./connection.ts";
import { explain } from "./explain.ts";
import { formatDuration, type NodeSummary } from "./format.ts";
import { listNodes, type CallSettings } from "./nodes.ts";

export interface HealthCheck {
  /** nodes, clocks, consensus, curator, backups, kubernetes or manifests. */
  name: string;
  ok: boolean;
  /** What was found: on failure, what fails and why. */
  detail: string;
}

export interface ClusterHealthInputs {
  nodes: NodeSummary[];
  /** The node whose curator leads; empty if none. */
  curatorLeader: string;
  /** etcd's members as the answering curator lists them, or why it could not. */
  etcd: { members: readonly { id: string; name: string; isLearner: boolean }[] } | { error: string };
  backups: { schedule?: BackupSchedule | undefined; status?: BackupStatus | undefined };
  /** Each worker's Node and whether it is Ready, by node ID; or why they could not be read; undefined: not asked (no worker UP). */
  kubernetes?: { ready: ReadonlyMap<string, boolean>; cordoned?: ReadonlyMap<string, string | undefined> } | { error: string } | undefined;
  /**
   * The stored add-on manifests (name, digest) and the controllers' status
   * of them (manifests.ts: the ConfigMap), or why they could not be read;
   * undefined: not asked.
   */
  manifests?: { stored: readonly { name: string; sha256: string }[]; statuses?: ReadonlyMap<string, ManifestStatus> } | { error: string } | undefined;
  nowMs: number;
}

export interface ClusterHealth {
  healthy: boolean;
  checks: HealthCheck[];
}

/** A proven backup older than this many intervals (and a minute) is overdue. */
const OVERDUE_INTERVALS = 2;

/** The verdict: every check, and whether they all pass. */
export function clusterHealth(inputs: ClusterHealthInputs): ClusterHealth {
  const checks = [nodesCheck(inputs.nodes), clocksCheck(inputs.nodes), consensusCheck(inputs), curatorCheck(inputs), backupsCheck(inputs), kubernetesCheck(inputs), manifestsCheck(inputs)];
  return { healthy: checks.every((c) => c.ok), checks };
}

const up = (nodes: readonly NodeSummary[]) => nodes.filter((n) => n.state === "UP");

function nodesCheck(nodes: readonly NodeSummary[]): HealthCheck {
  const upNodes = up(nodes);
  const waiting = nodes.filter((n) => n.state === "NEW" || n.state === "STANDBY").length;
  const also = waiting ? `; ${waiting} waiting for approval` : "";
  // CLOCK_SKEW is the clocks check's to say.
  const unwell = upNodes.filter((n) => n.health !== "HEALTHY" && n.health !== "CLOCK_SKEW");
  if (upNodes.length === 0) return { name: "nodes", ok: false, detail: `no node is UP${also}` };
  if (unwell.length === 0) return { name: "nodes", ok: true, detail: `${upNodes.length} UP, every one heard from and none failing${also}` };
  const why = unwell.map(
    (n) =>
      `${n.id} is ${n.health}${n.healthReason ? ` (${n.healthReason})` : n.health === "HEARTBEAT_TIMEOUT" && n.lastSeenMs !== undefined ? ` (last heard ${formatDuration(n.lastSeenMs)} ago)` : ""}`,
  );
  return { name: "nodes", ok: false, detail: `${why.join("; ")}${also}` };
}

function clocksCheck(nodes: readonly NodeSummary[]): HealthCheck {
  const skewed = up(nodes).filter((n) => n.health === "CLOCK_SKEW");
  if (skewed.length) return { name: "clocks", ok: false, detail: skewed.map((n) => `${n.id}: ${n.healthReason ?? "its clock is off"}`).join("; ") };
  const known = up(nodes).filter((n) => n.clockOffsetMs !== undefined);
  if (known.length === 0) return { name: "clocks", ok: true, detail: "no offset known yet (heartbeats say their time)" };
  const worst = known.reduce((a, b) => (Math.abs(b.clockOffsetMs!) > Math.abs(a.clockOffsetMs!) ? b : a));
  const off = Math.round(worst.clockOffsetMs!);
  return { name: "clocks", ok: true, detail: `${known.length} known, the furthest ${Math.abs(off)} ms ${off > 0 ? "ahead of" : "behind"} the curator leader's (${worst.id})` };
}

function consensusCheck(inputs: ClusterHealthInputs): HealthCheck {
  if ("error" in inputs.etcd) return { name: "consensus", ok: false, detail: `etcd's members could not be listed: ${inputs.etcd.error}` };
  const members = inputs.etcd.members;
  const roles = new Set(inputs.nodes.filter((n) => n.roles.includes("consensus")).map((n) => n.id));
  const voters = new Set(members.filter((m) => !m.isLearner && m.name).map((m) => m.name));
  const problems = [
    ...members.filter((m) => m.isLearner).map((m) => `member ${m.id}${m.name ? ` (${m.name})` : ""} is still a learner`),
    ...members.filter((m) => !m.isLearner && !m.name).map((m) => `member ${m.id} never started`),
    ...[...roles].filter((id) => !voters.has(id) && !members.some((m) => m.isLearner && m.name === id)).map((id) => `${id} holds the consensus role but is no voting member`),
    ...[...voters].filter((name) => !roles.has(name)).map((name) => `member ${name} votes, but no node holds its consensus role`),
  ];
  if (problems.length) return { name: "consensus", ok: false, detail: problems.join("; ") };
  return { name: "consensus", ok: true, detail: `${voters.size} voting member${voters.size === 1 ? "" : "s"}, one for each consensus node, no learner` };
}

function curatorCheck(inputs: ClusterHealthInputs): HealthCheck {
  if (!inputs.curatorLeader) return { name: "curator", ok: false, detail: "no curator leads" };
  return { name: "curator", ok: true, detail: `${inputs.curatorLeader} leads` };
}

function backupsCheck(inputs: ClusterHealthInputs): HealthCheck {
  const { schedule, status } = inputs.backups;
  if (!schedule || schedule.everyMinutes === 0) return { name: "backups", ok: true, detail: "none scheduled (not judged)" };
  const ours = status && status.nodeId === schedule.nodeId ? status : undefined;
  if (ours?.lastError) return { name: "backups", ok: false, detail: `the last attempt failed: ${ours.lastError}` };
  const proven = ours?.lastVerified;
  if (!proven) return { name: "backups", ok: false, detail: `no backup proven to restore yet (every ${schedule.everyMinutes} min by ${schedule.nodeId})` };
  const ageMs = inputs.nowMs - Number(proven.timeMs);
  const allowedMs = OVERDUE_INTERVALS * schedule.everyMinutes * 60_000 + 60_000;
  if (ageMs > allowedMs) return { name: "backups", ok: false, detail: `the last proven backup is ${formatDuration(ageMs)} old (every ${schedule.everyMinutes} min by ${schedule.nodeId})` };
  return { name: "backups", ok: true, detail: `the last proven backup is ${formatDuration(Math.max(0, ageMs))} old (every ${schedule.everyMinutes} min)` };
}

function kubernetesCheck(inputs: ClusterHealthInputs): HealthCheck {
  const workers = up(inputs.nodes).filter((n) => n.roles.includes("kubernetes-worker"));
  if (workers.length === 0) return { name: "kubernetes", ok: true, detail: "no worker is UP (not judged)" };
  const k = inputs.kubernetes;
  if (!k) return { name: "kubernetes", ok: false, detail: "the workers' Nodes were not read" };
  if ("error" in k) return { name: "kubernetes", ok: false, detail: `the workers' Nodes could not be read: ${k.error}` };
  const notReady = workers.filter((w) => k.ready.get(w.id) !== true).map((w) => `${w.id} ${k.ready.has(w.id) ? "is not Ready" : "has no Node"}`);
  if (notReady.length) return { name: "kubernetes", ok: false, detail: notReady.join("; ") };
  // A cordon is named, not failed: a drain makes one on purpose, and an
  // interrupted one leaves it; the owner should see either.
  const cordoned = [...(k.cordoned ?? new Map<string, string | undefined>())].map(([node, mark]) => `${node} ${describeCordon(mark, inputs.nowMs)}`);
  return { name: "kubernetes", ok: true, detail: `${workers.length} worker${workers.length === 1 ? "" : "s"}, every Node Ready${cordoned.length ? `; cordoned: ${cordoned.join(", ")}` : ""}` };
}

function manifestsCheck(inputs: ClusterHealthInputs): HealthCheck {
  const m = inputs.manifests;
  if (!m) return { name: "manifests", ok: true, detail: "not read" };
  if ("error" in m) return { name: "manifests", ok: false, detail: `could not be read: ${m.error}` };
  if (m.stored.length === 0) return { name: "manifests", ok: true, detail: "none stored (not judged)" };
  const n = `${m.stored.length} stored`;
  if (!m.statuses) return { name: "manifests", ok: true, detail: `${n}; no Kubernetes controller is UP to apply them yet (not judged)` };
  const problems: string[] = [];
  for (const { name, sha256 } of m.stored) {
    const status = m.statuses.get(name);
    if (!status || status.sha256 !== sha256) problems.push(`${name}: not applied yet`);
    else if (status.error) problems.push(`${name}: ${status.applied} of ${status.objects} objects applied; ${status.error}`);
  }
  if (problems.length) return { name: "manifests", ok: false, detail: problems.join("; ") };
  return { name: "manifests", ok: true, detail: `${n}, every one applied` };
}

/** "for 4m 10s, by ctl node reboot" from a command's mark (drain.ts), or what is known of an operator's own cordon. */
function describeCordon(mark: string | undefined, nowMs: number): string {
  const parsed = parseCordonMark(mark);
  if (!parsed) return "(by an operator; since when is not recorded)";
  return `for ${formatDuration(Math.max(0, nowMs - parsed.atMs))}, by ${parsed.by}`;
}

/** The verdict as people read it: a line per check, then the verdict. */
export function healthTable(health: ClusterHealth): string {
  const width = Math.max(...health.checks.map((c) => c.name.length));
  const lines = health.checks.map((c) => `${c.name.padEnd(width)}  ${c.ok ? "ok  " : "FAIL"}  ${c.detail}`);
  const failed = health.checks.filter((c) => !c.ok).map((c) => c.name);
  return [...lines, "", health.healthy ? "cluster: healthy" : `cluster: degraded (${failed.join(", ")})`].join("\n");
}

/** Asks the cluster what the checks need. Throws (an OperatorError naming why) when no curator answers: the caller's exit code 2. */
export async function gatherClusterHealth(credentials: OwnerCredentials, settings: CallSettings): Promise<ClusterHealthInputs> {
  const [info, nodes, stored] = await Promise.all([
    withFailover(Management, credentials, (m) => m.getClusterInfo({}, { timeoutMs: settings.timeoutMs }), settings.progress),
    listNodes(credentials, settings),
    withFailover(Management, credentials, (m) => m.listManifests({}, { timeoutMs: settings.timeoutMs }), settings.progress).then(
      ({ manifests }) => manifests.map((m) => ({ name: m.name, sha256: m.sha256 })),
      (err: unknown) => ({ error: explain(err).line }),
    ),
  ]);
  const workersUp = up(nodes).some((n) => n.roles.includes("kubernetes-worker"));
  const controllerUp = up(nodes).some((n) => n.roles.includes("kubernetes-controller"));
  return {
    nodes,
    curatorLeader: info.curatorLeader,
    etcd: info.etcdMembersError ? { error: info.etcdMembersError } : { members: info.etcdMembers },
    backups: { schedule: info.backupSchedule, status: info.backupStatus },
    kubernetes: workersUp ? await workerReadiness(credentials, settings).catch((err: unknown) => ({ error: explain(err).line })) : undefined,
    manifests: await manifestsInputs(stored, controllerUp, credentials, settings),
    nowMs: Date.now(),
  };
}

/** The manifests check's input: the stored ones, and (while a controller is UP to apply them) their status. */
async function manifestsInputs(
  stored: { name: string; sha256: string }[] | { error: string },
  controllerUp: boolean,
  credentials: OwnerCredentials,
  settings: CallSettings,
): Promise<ClusterHealthInputs["manifests"]> {
  if ("error" in stored) return stored;
  if (!controllerUp || stored.length === 0) return { stored };
  return manifestStatuses(credentials, settings).then(
    (statuses) => ({ stored, statuses }),
    (err: unknown) => ({ error: `their status: ${explain(err).line}` }),
  );
}

/** The controllers' status of the add-on manifests (the ConfigMap; absent: none applied yet). */
async function manifestStatuses(credentials: OwnerCredentials, settings: CallSettings): Promise<Map<string, ManifestStatus>> {
  const api = await ownerKubernetes(credentials, settings);
  const answer = await api.request("GET", `/api/v1/namespaces/${MANIFESTS_STATUS.namespace}/configmaps/${MANIFESTS_STATUS.name}`);
  if (answer.status === 404) return new Map();
  if (answer.status !== 200) throw new OperatorError(`the apiserver refused to read the manifests' status: ${statusMessage(answer)}`);
  return parseManifestsStatus((answer.body as { data?: Record<string, string> }).data);
}

/** Each Node's Ready condition, read from an apiserver with a short-lived owner certificate (ctl kubeconfig's identity). */
async function workerReadiness(credentials: OwnerCredentials, settings: CallSettings): Promise<NodeReadiness> {
  return nodeReadiness(await ownerKubernetes(credentials, settings));
}

export interface NodeReadiness {
  ready: Map<string, boolean>;
  /** Cordoned Nodes, each with a command's mark if a drain made the cordon. */
  cordoned: Map<string, string | undefined>;
}

/** Each Node's Ready condition and cordon, as `api` lists them. */
export async function nodeReadiness(api: OwnerKubernetes): Promise<NodeReadiness> {
  const answer = await api.request("GET", "/api/v1/nodes");
  if (answer.status !== 200) throw new OperatorError(`the apiserver refused to list the Nodes: ${statusMessage(answer)}`);
  const list = answer.body as {
    items?: { metadata?: { name?: string; annotations?: Record<string, string> }; spec?: { unschedulable?: boolean }; status?: { conditions?: { type?: string; status?: string }[] } }[];
  };
  const ready = new Map<string, boolean>();
  const cordoned = new Map<string, string | undefined>();
  for (const item of list.items ?? []) {
    const name = item.metadata?.name;
    if (!name) continue;
    ready.set(name, item.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True") ?? false);
    if (item.spec?.unschedulable === true) cordoned.set(name, item.metadata?.annotations?.[CORDONED_BY_ANNOTATION]);
  }
  return { ready, cordoned };
}

/** How often `ctl cluster health --wait` asks again. */
const HEALTH_POLL_MS = 2_000;

/** The verdict `ctl cluster health` prints, with its exit status. */
export type HealthVerdict = { verdict: "healthy" | "degraded"; health: ClusterHealth; exitStatus: 0 | 1 } | { verdict: "unreachable"; reason: string; exitStatus: 2 };

/**
 * One verdict for the cluster; with `waitUntilMs` (an epoch time), asked
 * again every HEALTH_POLL_MS until every check passes or that time comes,
 * with what still fails told to `progress`.
 */
export async function clusterVerdict(credentials: OwnerCredentials, settings: CallSettings, waitUntilMs?: number): Promise<HealthVerdict> {
  const waiting = () => waitUntilMs !== undefined && Date.now() < waitUntilMs;
  for (;;) {
    let health: ClusterHealth;
    try {
      health = clusterHealth(await gatherClusterHealth(credentials, settings));
    } catch (err) {
      const { line } = explain(err);
      if (!waiting()) return { verdict: "unreachable", reason: line, exitStatus: 2 };
      settings.progress?.(`unreachable: ${line}`);
      await Bun.sleep(HEALTH_POLL_MS);
      continue;
    }
    if (health.healthy || !waiting()) return health.healthy ? { verdict: "healthy", health, exitStatus: 0 } : { verdict: "degraded", health, exitStatus: 1 };
    const failing = health.checks.filter((c) => !c.ok).map((c) => `${c.name}: ${c.detail}`);
    settings.progress?.(`waiting: ${failing.join("; ")}`);
    await Bun.sleep(HEALTH_POLL_MS);
  }
}
