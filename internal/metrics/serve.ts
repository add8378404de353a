// GET /metrics on the node management port: who may read, and the answer.
// The caller is judged by its client certificate before anything else,
// exactly as a gRPC call is (rpc's authenticate): the owner, or a metrics
// reader certificate under the cluster CA. Everyone else is refused, and
// the refusal goes to the cluster's audit trail. Readers share scrapes
// (NodeMetrics.sharedScrape): one at a time, each answering for a second.

import type { X509Certificate } from "node:crypto";
import { authenticate, peerCertificateOf, type HttpHandler, type Peer } from "../rpc/mod.ts";
import type { NodeMetrics } from "./node_metrics.ts";

/** The one path served. */
export const METRICS_PATH = "/metrics";
/** Prometheus's text format. */
const TEXT_FORMAT = "text/plain; version=0.0.4; charset=utf-8";

export interface ScrapeRefusal {
  peer: Peer;
  remoteAddress: string | undefined;
  /** Why, in one line. */
  reason: string;
}

export interface MetricsHandlerOptions {
  metrics: NodeMetrics;
  /** The cluster CA the caller's certificate must chain to. */
  ca: () => X509Certificate;
  /** Told of each refused scrape (the audit trail), never of an answered one. */
  refused?: (refusal: ScrapeRefusal) => void;
}

/** Why `peer` may not read metrics, or undefined if it may. */
export function scrapeRefusal(peer: Peer): string | undefined {
  switch (peer.kind) {
    case "owner":
    case "metrics":
      return undefined;
    case "anonymous":
      return "no client certificate presented";
    case "local":
      return "metrics are read over TLS, not a local socket";
    case "key":
      return `client certificate not accepted: ${peer.whyNotCluster}`;
    case "node":
    case "join":
      return `a ${peer.kind} certificate may not read metrics (use ctl metrics credentials)`;
  }
}

export function metricsHandler(options: MetricsHandlerOptions): HttpHandler {
  return async (request) => {
    // Who asks, before what they ask.
    const peer = authenticate(peerCertificateOf(request.socket?.getPeerCertificate?.()), options.ca());
    const why = scrapeRefusal(peer);
    if (why !== undefined) {
      try {
        options.refused?.({ peer, remoteAddress: request.socket?.remoteAddress, reason: why });
      } catch {
        // The trail's trouble is its own.
      }
      return { status: peer.kind === "anonymous" || peer.kind === "key" ? 401 : 403, contentType: "text/plain", body: `refused: ${why}\n` };
    }
    const path = request.path.split("?")[0];
    if (path !== METRICS_PATH) return { status: 404, contentType: "text/plain", body: `not found: only ${METRICS_PATH} is served here\n` };
    if (request.method !== "GET" && request.method !== "HEAD") return { status: 405, contentType: "text/plain", body: `method not allowed: ${METRICS_PATH} is read with GET\n` };
    return { status: 200, contentType: TEXT_FORMAT, body: await options.metrics.sharedScrape() };
  };
}
