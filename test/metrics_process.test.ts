// Metrics on three node processes, as an operator sets up Prometheus: ctl
// writes a metrics reader's credentials and a scrape configuration, a real
// Prometheus (Debian's) scrapes every node with them, and the refusals
// (no certificate, a node's certificate, the reader on a gRPC method) are
// refused and audited.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { X509Certificate, createPrivateKey } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { Management } from "../proto/gen/api/management_pb.ts";
import { loadCredentials } from "../internal/cluster/mod.ts";
import { CURATOR_PORT } from "../internal/curator/client/mod.ts";
import { NODE_MANAGEMENT_PORT } from "../internal/nodemgmt/client/mod.ts";
import { privateKeyPem } from "../internal/pki/mod.ts";
import { channelCredentials, channelOptions, createClient, hostPort, RpcError, Status } from "../internal/rpc/mod.ts";
import { eventually, freePort, tempDir } from "../internal/testing/mod.ts";
import { formProcessCluster, type ProcessCluster } from "./support/process_cluster.ts";

const dir = tempDir("nodecore-metrics-");
let cluster: ProcessCluster;
const readerDir = join(dir.path, "reader");

beforeAll(async () => {
  cluster = await formProcessCluster(dir.path, 140, () => {}, { consensus: 1 });
}, 240_000);
afterAll(async () => {
  await cluster?.stop();
  dir[Symbol.dispose]();
}, 60_000);

const reader = () => ({
  ca: readFileSync(join(readerDir, "ca.pem"), "utf8"),
  cert: readFileSync(join(readerDir, "reader.pem"), "utf8"),
  key: readFileSync(join(readerDir, "reader.key"), "utf8"),
});

async function scrape(nodeIndex: number, tls: { ca: string; cert?: string; key?: string }, path = "/metrics"): Promise<{ status: number; body: string }> {
  const node = cluster.nodes[nodeIndex]!;
  const response = await fetch(`https://${hostPort(node.address, NODE_MANAGEMENT_PORT)}${path}`, {
    tls: { ...tls, serverName: cluster.ids.get(node)! },
    signal: AbortSignal.timeout(10_000),
  } as RequestInit);
  return { status: response.status, body: await response.text() };
}

test("ctl metrics credentials writes a reader and a configuration; the reader reads every node's metrics, etcd's with the consensus node's", async () => {
  const result = await cluster.ctl("metrics", "credentials", readerDir, "--scrape-interval", "1", "--json");
  const written = JSON.parse(result.stdout) as { targets: string[]; config: string };
  expect(written.targets.sort()).toEqual([...cluster.ids.values()].sort());
  const certificate = new X509Certificate(reader().cert);
  expect(certificate.subject).toContain("O=nodecore metrics reader");

  const first = await scrape(0, reader());
  expect(first.status).toBe(200);
  // The supervisor's tree, the heartbeat, the log rings, the gRPC servers' calls, and etcd's own.
  expect(first.body).toMatch(/^nodecore_runnable_state\{runnable="root\.roleserve\.heartbeat",state="healthy"\} 1$/m);
  expect(first.body).toMatch(/^nodecore_runnable_restarts_total\{runnable="root\.roleserve"\} \d+$/m);
  expect(first.body).toMatch(/^nodecore_heartbeat_age_seconds \d/m);
  expect(first.body).toMatch(/^nodecore_log_entries_dropped_total\{reason="rotated"\} \d+$/m);
  expect(first.body).toMatch(/^nodecore_rpc_call_duration_seconds_count\{method="Curator\/Heartbeat",kind="stream",code="OK"\} \d+$|^nodecore_rpc_streams_open\{method="Curator\/Heartbeat"\} [1-9]/m);
  expect(first.body).toMatch(/^nodecore_rpc_streams_open\{method="Curator\/Watch"\} [1-9]\d*$/m);
  expect(first.body).toMatch(/^nodecore_process_resident_memory_bytes \d+$/m);
  expect(first.body).toMatch(/^etcd_server_has_leader 1$/m);
  // A node without etcd has none of etcd's.
  const second = await scrape(1, reader());
  expect(second.status).toBe(200);
  expect(second.body).toMatch(/^nodecore_runnable_state\{/m);
  expect(second.body).not.toMatch(/^etcd_server_has_leader/m);

  // ctl metrics show: the owner reads one node.
  const shown = await cluster.ctl("metrics", "show", cluster.ids.get(cluster.nodes[2]!)!);
  expect(shown.stdout).toMatch(/^nodecore_runnable_state\{/m);
}, 120_000);

test("no certificate, a node's certificate, a wrong path: refused, one line each; the refusals are in the audit trail", async () => {
  const { ca } = reader();
  const none = await scrape(0, { ca });
  expect(none).toEqual({ status: 401, body: "refused: no client certificate presented\n" });
  const node2 = loadCredentials(cluster.nodes[1]!.layout)!;
  const asNode = await scrape(0, { ca, cert: node2.certificate.toString(), key: privateKeyPem(node2.privateKey) });
  expect(asNode.status).toBe(403);
  expect(asNode.body).toBe("refused: a node certificate may not read metrics (use ctl metrics credentials)\n");
  const wrongPath = await scrape(0, reader(), "/debug/pprof");
  expect(wrongPath.status).toBe(404);

  const rows = await eventually(
    async () => {
      const all = (await cluster.ctl("events", "-n", "1000", "--json")).stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { method: string; actor: string; result: string; node: string });
      const refused = all.filter((r) => r.method === "NodeManagement/Metrics");
      expect(refused.length).toBeGreaterThanOrEqual(2);
      return refused;
    },
    { timeoutMs: 30_000, what: "the refused scrapes in the trail" },
  );
  expect(rows.some((r) => r.actor.startsWith("anonymous from ") && r.result.includes("no client certificate"))).toBe(true);
  expect(rows.some((r) => r.actor.startsWith(`${cluster.ids.get(cluster.nodes[1]!)} (as `) && r.result.includes("a node certificate may not read metrics"))).toBe(true);
  expect(rows.every((r) => r.node === cluster.ids.get(cluster.nodes[0]!))).toBe(true);
}, 120_000);

test("the reader certificate opens no gRPC method: a write is refused, and audited", async () => {
  const { ca, cert, key } = reader();
  const node1 = cluster.nodes[0]!;
  const client = createClient(Management, hostPort(node1.address, CURATOR_PORT), {
    credentials: channelCredentials({ server: { ca: new X509Certificate(ca), verify: () => undefined }, certificate: new X509Certificate(cert), privateKey: createPrivateKey(key) }),
    channelOptions: channelOptions(),
  });
  try {
    const error = await client.approveNode({ id: cluster.ids.get(cluster.nodes[1]!)! }, { timeoutMs: 10_000 }).then(
      () => undefined,
      (err: unknown) => err,
    );
    expect(error).toBeInstanceOf(RpcError);
    expect((error as RpcError).code).toBe(Status.PERMISSION_DENIED);
    expect((error as RpcError).message).toContain("a metrics reader certificate may only read metrics");
  } finally {
    client.close();
  }
  // The curator's trail has it, under the reader's name.
  await eventually(
    async () => {
      const all = (await cluster.ctl("events", "-n", "1000", "--json")).stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { kind: string; method: string; actor: string });
      expect(all.some((r) => r.kind === "refusal" && r.method === "Management/ApproveNode" && r.actor.startsWith('metrics reader "prometheus" from '))).toBe(true);
    },
    { timeoutMs: 30_000, what: "the reader's refused write in the trail" },
  );
}, 60_000);

test("Prometheus scrapes every node with the written configuration", async () => {
  const config = join(readerDir, "prometheus.yml");
  const port = await freePort();
  const prometheus = Bun.spawn(["prometheus", `--config.file=${config}`, `--storage.tsdb.path=${join(dir.path, "tsdb")}`, `--web.listen-address=127.0.0.1:${port}`, "--log.level=warn"], {
    stdout: "ignore",
    stderr: "pipe",
  });
  const api = async <T>(path: string): Promise<T> => {
    const response = await fetch(`http://127.0.0.1:${port}/api/v1/${path}`, { signal: AbortSignal.timeout(5_000) });
    const body = (await response.json()) as { status: string; data: T };
    expect(body.status).toBe("success");
    return body.data;
  };
  try {
    type Targets = { activeTargets: { labels: { node: string }; health: string; lastError: string }[] };
    const targets = await eventually(
      async () => {
        const data = await api<Targets>("targets");
        expect(data.activeTargets.map((t) => `${t.labels.node} ${t.health} ${t.lastError}`).sort()).toEqual([...cluster.ids.values()].map((id) => `${id} up `).sort());
        return data.activeTargets;
      },
      { timeoutMs: 60_000, intervalMs: 1_000, what: "Prometheus's targets all up" },
    );
    expect(targets.length).toBe(3);
    type Vector = { resultType: string; result: { metric: Record<string, string>; value: [number, string] }[] };
    const healthy = await eventually(
      async () => {
        const data = await api<Vector>(`query?query=${encodeURIComponent('nodecore_runnable_state{runnable="root.roleserve.heartbeat",state="healthy"}')}`);
        expect(data.result.length).toBe(3);
        return data.result;
      },
      { timeoutMs: 30_000, intervalMs: 1_000, what: "the heartbeat runnables in Prometheus" },
    );
    expect(healthy.every((r) => r.value[1] === "1")).toBe(true);
    const leader = await api<Vector>(`query?query=${encodeURIComponent("etcd_server_has_leader")}`);
    expect(leader.result.map((r) => r.metric.node)).toEqual([cluster.ids.get(cluster.nodes[0]!)!]);
  } finally {
    prometheus.kill();
    await prometheus.exited;
  }
}, 120_000);

// The configuration ctl wrote is what Prometheus read: one job per node, each naming its node's certificate.
test("the configuration names each node's certificate", () => {
  const text = readFileSync(join(readerDir, "prometheus.yml"), "utf8");
  for (const id of cluster.ids.values()) expect(text).toContain(`server_name: "${id}"`);
});
