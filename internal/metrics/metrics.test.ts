import { expect, test } from "bun:test";
import type { TLSSocket } from "node:tls";
import type { X509Certificate } from "node:crypto";
import { generateKeyPair, issueMetricsReaderCertificate, selfSignedCertificate } from "../pki/mod.ts";
import { testCA, testNode, testOwner } from "../testing/mod.ts";
import type { Peer } from "../rpc/mod.ts";
import { NodeMetrics, metricsHandler, prometheusConfig, SCRAPE_REUSE_MS, scrapeRefusal } from "./mod.ts";

const dump = [
  { path: "root", state: "healthy" as const, restarts: 0, sinceMs: 1, backoffMs: 500 },
  { path: "root.roleserve.heartbeat", state: "dead" as const, restarts: 4, sinceMs: 1, backoffMs: 500 },
];

/** Every sample line's metric name, once. */
function names(text: string): string[] {
  return [
    ...new Set(
      text
        .split("\n")
        .filter((l) => l && !l.startsWith("#"))
        .map((l) => l.split(/[ {]/)[0]!),
    ),
  ];
}

test("the node's metric names, each under nodecore_", async () => {
  const metrics = new NodeMetrics({ runnables: () => dump, logDrops: () => ({ rotated: 7, space: 1, follower: 0 }) });
  metrics.heartbeatAnswered();
  metrics.meter.opened("Curator/Watch");
  metrics.meter.finished("Management/GetNodes", "unary", "OK", 0.002, false);
  const text = await metrics.scrape();
  const own = names(text).filter((n) => !n.startsWith("nodecore_process_") && !n.startsWith("nodecore_nodejs_"));
  expect(own.sort()).toEqual(
    [
      "nodecore_heartbeat_age_seconds",
      "nodecore_log_entries_dropped_total",
      "nodecore_rpc_call_duration_seconds_bucket",
      "nodecore_rpc_call_duration_seconds_count",
      "nodecore_rpc_call_duration_seconds_sum",
      "nodecore_rpc_streams_open",
      "nodecore_runnable_restarts_total",
      "nodecore_runnable_state",
    ].sort(),
  );
  expect(names(text)).toContain("nodecore_process_resident_memory_bytes");
  // One line per state, 1 for the current one.
  expect(text).toContain('nodecore_runnable_state{runnable="root.roleserve.heartbeat",state="dead"} 1');
  expect(text).toContain('nodecore_runnable_state{runnable="root.roleserve.heartbeat",state="healthy"} 0');
  expect(text).toContain('nodecore_runnable_restarts_total{runnable="root.roleserve.heartbeat"} 4');
  expect(text).toContain('nodecore_log_entries_dropped_total{reason="rotated"} 7');
  expect(text).toContain('nodecore_rpc_streams_open{method="Curator/Watch"} 1');
  expect(text).toContain('nodecore_rpc_call_duration_seconds_count{method="Management/GetNodes",kind="unary",code="OK"} 1');
  expect(text).toMatch(/^nodecore_heartbeat_age_seconds 0(\.\d+)?$/m);
  // A stream that ends leaves the open count.
  metrics.meter.finished("Curator/Watch", "stream", "CANCELLED", 12, true);
  expect(await metrics.scrape()).toContain('nodecore_rpc_streams_open{method="Curator/Watch"} 0');
});

test("a runnable that went away leaves the figures; no heartbeat answered yet: the age counts from the start", async () => {
  let now = dump;
  const metrics = new NodeMetrics({ runnables: () => now });
  expect(await metrics.scrape()).toContain('runnable="root.roleserve.heartbeat"');
  now = dump.slice(0, 1);
  const text = await metrics.scrape();
  expect(text).not.toContain('runnable="root.roleserve.heartbeat"');
  expect(text).toMatch(/^nodecore_heartbeat_age_seconds \d/m);
});

test("etcd's metrics follow the node's; when etcd fails, a comment says why and the scrape still parses", async () => {
  const ok = new NodeMetrics({ runnables: () => dump, etcd: () => async () => "# HELP etcd_server_has_leader x\netcd_server_has_leader 1" });
  expect(await ok.scrape()).toMatch(/\netcd_server_has_leader 1\n$/);
  const failing = new NodeMetrics({
    runnables: () => dump,
    etcd: () => async () => {
      throw new Error("connect ECONNREFUSED\n127.0.0.1:2379");
    },
  });
  const text = await failing.scrape();
  expect(text).toMatch(/\n# etcd's metrics are missing: connect ECONNREFUSED 127\.0\.0\.1:2379\n$/);
  // Not a consensus node: nothing of etcd's, and no comment either.
  const none = new NodeMetrics({ runnables: () => dump, etcd: () => undefined });
  expect(await none.scrape()).not.toContain("etcd");
});

test("readers share scrapes: many at once cost one, and a text answers for a second, then a new one is made", async () => {
  let scrapes = 0;
  let release: () => void = () => {};
  const metrics = new NodeMetrics({
    runnables: () => dump,
    etcd: () => async () => {
      scrapes++;
      await new Promise<void>((resolve) => (release = resolve));
      return `etcd_scrape_number ${scrapes}`;
    },
  });
  const readers = Array.from({ length: 100 }, () => metrics.sharedScrape());
  await Bun.sleep(10);
  release();
  const texts = await Promise.all(readers);
  expect(scrapes).toBe(1);
  expect(new Set(texts).size).toBe(1);
  expect(texts[0]).toContain("etcd_scrape_number 1");
  // Within the second: the same text, no new scrape.
  expect(await metrics.sharedScrape()).toBe(texts[0]!);
  expect(scrapes).toBe(1);
  await Bun.sleep(SCRAPE_REUSE_MS + 50);
  const next = metrics.sharedScrape();
  await Bun.sleep(10);
  release();
  expect(await next).toContain("etcd_scrape_number 2");
});

const ca = testCA();
const foreign = testCA();
const reader = issueMetricsReaderCertificate(ca, generateKeyPair().publicKey, "prometheus");

test("who may scrape: the owner and metrics readers; nodes, joins, strangers and the anonymous may not", () => {
  const table: [Peer["kind"], boolean][] = [
    ["owner", true],
    ["metrics", true],
    ["node", false],
    ["join", false],
    ["key", false],
    ["anonymous", false],
  ];
  for (const [kind, allowed] of table) {
    const peer = { kind, whyNotCluster: "signed by another CA" } as unknown as Peer;
    expect([kind, scrapeRefusal(peer) === undefined]).toEqual([kind, allowed]);
  }
});

function request(certificate: X509Certificate | undefined, path = "/metrics", method = "GET") {
  const socket = { remoteAddress: "192.0.2.7", getPeerCertificate: () => (certificate ? { raw: Buffer.from(certificate.raw) } : {}) } as unknown as TLSSocket;
  return { method, path, socket };
}

test("the handler checks the caller before the path, and reports each refusal once", async () => {
  const refusals: string[] = [];
  const handler = metricsHandler({ metrics: new NodeMetrics({ runnables: () => dump }), ca: () => ca.certificate, refused: (r) => refusals.push(`${r.peer.kind} ${r.remoteAddress}: ${r.reason}`) });
  const answered = await handler(request(reader));
  expect(answered.status).toBe(200);
  expect(answered.contentType).toContain("text/plain; version=0.0.4");
  expect((await handler(request(testOwner(ca).certificate, "/metrics?x=1"))).status).toBe(200);
  // Wrong path or method: only for those who may read at all.
  expect((await handler(request(reader, "/secrets"))).status).toBe(404);
  expect((await handler(request(reader, "/metrics", "POST"))).status).toBe(405);
  expect(await handler(request(undefined, "/secrets"))).toEqual({ status: 401, contentType: "text/plain", body: "refused: no client certificate presented\n" });
  expect((await handler(request(testNode(ca).certificate))).status).toBe(403);
  // A reader under another cluster's CA, and a self-signed one, are strangers.
  const stranger = issueMetricsReaderCertificate(foreign, generateKeyPair().publicKey, "prometheus");
  expect((await handler(request(stranger))).status).toBe(401);
  expect((await handler(request(selfSignedCertificate(generateKeyPair())))).status).toBe(401);
  expect(refusals).toHaveLength(4);
  expect(refusals[0]).toBe("anonymous 192.0.2.7: no client certificate presented");
  expect(refusals[1]).toStartWith("node 192.0.2.7: a node certificate may not read metrics");
});

test("the Prometheus configuration: one job per node, each naming the node's certificate; no nodes, no jobs", () => {
  const text = prometheusConfig(
    [
      { nodeId: "node-0123456789abcdef", address: "10.0.0.2", port: 7836 },
      { nodeId: "node-fedcba9876543210", address: "fd00::3", port: 7836 },
    ],
    { ca: "/r/ca.pem", certificate: "/r/reader.pem", key: "/r/reader.key" },
    5,
  );
  expect(text).toContain("  scrape_interval: 5s\n");
  expect(text.match(/- job_name: /g)).toHaveLength(2);
  expect(text).toContain('      server_name: "node-fedcba9876543210"\n');
  expect(text).toContain('      - targets: ["[fd00::3]:7836"]\n');
  expect(text).toContain('      cert_file: "/r/reader.pem"\n');
  expect(prometheusConfig([], { ca: "a", certificate: "b", key: "c" })).toContain("scrape_configs: []\n");
});
