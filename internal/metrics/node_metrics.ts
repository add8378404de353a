// One node's metrics, in Prometheus's text format, made with prom-client
// (the ecosystem's library) into a registry of the node's own: nothing is
// registered globally, so node processes sharing a test process keep apart.
//
// Most figures are read when scraped (the supervisor's tree, the log
// rings' drop counts, the heartbeat's age); the gRPC servers count their
// calls as they end (CallMeter). etcd's own metrics, fetched from the local
// member, follow the node's unchanged.

import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from "prom-client";
import { connectionDrops, type CallMeter } from "../rpc/mod.ts";
import type { RunnableDump, RunnableState } from "../supervisor/mod.ts";

/** Every metric of the node's own starts so. */
export const PREFIX = "nodecore_";

/** Call latency buckets, in seconds: a loopback call is a millisecond, a slow etcd write a second. */
const LATENCY_BUCKETS = [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10];

const RUNNABLE_STATES: readonly RunnableState[] = ["starting", "healthy", "done", "dead", "stopping", "stopped", "stuck"];

/** How long etcd's metrics may take before the scrape goes on without them. */
export const ETCD_METRICS_TIMEOUT_MS = 5_000;
/** A scrape's text answers every reader who asks within this long of it (sharedScrape). */
export const SCRAPE_REUSE_MS = 1_000;

export interface MetricSources {
  /** The supervision tree now. */
  runnables: () => readonly RunnableDump[];
  /** The log tree's drop counts (LogTree.drops). */
  logDrops?: () => { rotated: number; space: number; follower: number };
  /** etcd's metrics text from the local member, while this node runs one. */
  etcd?: () => ((signal: AbortSignal) => Promise<string>) | undefined;
}

export class NodeMetrics {
  readonly registry = new Registry();
  /** The last answer; before any, when the metrics began, so that a node never answered shows a growing age. */
  private heartbeatAnsweredMs = Date.now();
  /** What every gRPC server of the node tells of its calls (ServeOptions.meter). */
  readonly meter: CallMeter;

  constructor(private readonly sources: MetricSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: PREFIX });

    const state = new Gauge({
      name: `${PREFIX}runnable_state`,
      help: "1 for each runnable's current state in the supervision tree (internal/supervisor)",
      labelNames: ["runnable", "state"],
      registers,
      collect: () => {
        state.reset();
        for (const r of this.sources.runnables()) {
          for (const s of RUNNABLE_STATES) state.set({ runnable: r.path, state: s }, r.state === s ? 1 : 0);
        }
      },
    });
    const restarts = new Counter({
      name: `${PREFIX}runnable_restarts_total`,
      help: "Restarts of each runnable since this boot",
      labelNames: ["runnable"],
      registers,
      collect: () => {
        restarts.reset();
        for (const r of this.sources.runnables()) restarts.inc({ runnable: r.path }, r.restarts);
      },
    });
    const heartbeat: Gauge = new Gauge({
      name: `${PREFIX}heartbeat_age_seconds`,
      help: "Time since the curator leader last answered this node's heartbeat (before the first answer: since this boot's node core started)",
      registers,
      collect: (): void => heartbeat.set((Date.now() - this.heartbeatAnsweredMs) / 1000),
    });
    const drops = new Counter({
      name: `${PREFIX}log_entries_dropped_total`,
      help: "Log entries let go: rotated out of a full ring, dropped to keep the rings' total size, or not sent to a follower that fell behind",
      labelNames: ["reason"],
      registers,
      collect: () => {
        drops.reset();
        const now = this.sources.logDrops?.();
        if (!now) return;
        for (const [reason, n] of Object.entries(now)) drops.inc({ reason }, n);
      },
    });
    const connectionsDropped = new Counter({
      name: `${PREFIX}rpc_connections_dropped_total`,
      help: "Connections the node's servers dropped since this boot: refused at once for a full bound (refused-process-connections, refused-server-connections, refused-server-handshakes, refused-source-connections, refused-source-handshakes), or later for saying nothing (silent) or calling nothing (idle) in time; by whether their source was known (an owner's or node's call let in from it)",
      labelNames: ["reason", "source"],
      registers,
      collect: () => {
        connectionsDropped.reset();
        for (const d of connectionDrops()) connectionsDropped.inc({ reason: d.reason, source: d.source }, d.count);
      },
    });
    const calls = new Histogram({
      name: `${PREFIX}rpc_call_duration_seconds`,
      help: "gRPC calls this node served, unary calls by how long they took to answer and streams by how long they lived, by method and status code",
      labelNames: ["method", "kind", "code"],
      buckets: LATENCY_BUCKETS,
      registers,
    });
    const open = new Gauge({
      name: `${PREFIX}rpc_streams_open`,
      help: "Streams open now, by method (Curator/Watch: the watches this node serves)",
      labelNames: ["method"],
      registers,
    });
    this.meter = {
      opened: (method) => open.inc({ method }),
      finished: (method, kind, code, seconds, wasOpen) => {
        calls.observe({ method, kind, code }, seconds);
        if (wasOpen) open.dec({ method });
      },
    };
  }

  /** The heartbeat worker's word: the leader answered just now. */
  heartbeatAnswered(): void {
    this.heartbeatAnsweredMs = Date.now();
  }

  /** The whole text: the node's metrics, then etcd's (or a line saying why they are missing). */
  private latest: { text: string; atMs: number } | undefined;
  private inFlight: Promise<string> | undefined;

  /**
   * What readers over the network get: one scrape at a time, whatever the
   * number of readers, and its text reused for SCRAPE_REUSE_MS after it.
   * So readers cost the node's event loop at most one scrape a second,
   * and its memory one text, however fast or many they are.
   */
  sharedScrape(): Promise<string> {
    if (this.latest && Date.now() - this.latest.atMs < SCRAPE_REUSE_MS) return Promise.resolve(this.latest.text);
    this.inFlight ??= this.scrape()
      .then((text) => {
        this.latest = { text, atMs: Date.now() };
        return text;
      })
      .finally(() => {
        this.inFlight = undefined;
      });
    return this.inFlight;
  }

  /** A scrape now, of its own (tests, and sharedScrape). */
  async scrape(signal?: AbortSignal): Promise<string> {
    const own = await this.registry.metrics();
    const etcd = this.sources.etcd?.();
    if (!etcd) return own;
    const timeout = AbortSignal.timeout(ETCD_METRICS_TIMEOUT_MS);
    try {
      const text = await etcd(signal ? AbortSignal.any([signal, timeout]) : timeout);
      return `${own}${text.endsWith("\n") ? text : `${text}\n`}`;
    } catch (err) {
      // A comment, so that the scrape still parses: the node's own figures count most.
      return `${own}# etcd's metrics are missing: ${oneLine((err as Error)?.message ?? String(err))}\n`;
    }
  }
}

function oneLine(text: string): string {
  return text.replace(/[\r\n]+/g, " ").slice(0, 300);
}
