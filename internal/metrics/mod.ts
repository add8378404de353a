// Metrics: what a node tells Prometheus about itself.
//
//   supervisor tree ──┐ (read at scrape)
//   log rings' drops ─┤
//   heartbeat answers ┼─▶ NodeMetrics (prom-client, a registry per node) ─┐
//   gRPC calls ───────┘   (CallMeter: every server's calls as they end)   │
//   local etcd member ──── its /metrics, fetched at scrape, appended ─────┤
//                                                                         ▼
//   Prometheus ── mTLS ──▶ node management port (7836), GET /metrics ─▶ metricsHandler
//                          (rpc/listener.ts routes what is not gRPC)     │ owner or metrics reader?
//                                                                        │ no: 401/403, audited
//
// Invariants:
//  - The caller is judged by its certificate before the path or method:
//    the owner, or a metrics reader certificate under the cluster CA (which
//    `ctl metrics credentials` has the curator issue, and which opens no gRPC
//    method at all). Node and join certificates are refused.
//  - A scrape never fails for etcd: its metrics are left out, with a comment
//    saying why, after ETCD_METRICS_TIMEOUT_MS at most.
//  - The node's own metric names start with nodecore_; etcd's keep theirs.
//
// Prometheus reaches each node under its own name: node certificates carry
// the node ID as their DNS name, so a scrape configuration has one job per
// node, each with its server_name (ctl metrics credentials writes one).

export { NodeMetrics, PREFIX, ETCD_METRICS_TIMEOUT_MS, SCRAPE_REUSE_MS, type MetricSources } from "./node_metrics.ts";
export { metricsHandler, scrapeRefusal, METRICS_PATH, type MetricsHandlerOptions, type ScrapeRefusal } from "./serve.ts";
export { prometheusConfig, type ScrapeTarget } from "./prometheus_config.ts";
