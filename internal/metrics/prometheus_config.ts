// A Prometheus scrape configuration for a cluster: one job per node, since
// each node proves the name in its certificate (its node ID), not its
// address, and a job's TLS settings name one server.

import { hostPort } from "../rpc/mod.ts";

export interface ScrapeTarget {
  nodeId: string;
  /** The node's address, as the cluster's records have it. */
  address: string;
  port: number;
}

export interface ScrapeFiles {
  ca: string;
  certificate: string;
  key: string;
}

/** YAML text: `global` with the interval, then one scrape job per target. Paths and names are quoted as JSON strings (valid YAML). */
export function prometheusConfig(targets: readonly ScrapeTarget[], files: ScrapeFiles, intervalSeconds = 15): string {
  const q = (text: string) => JSON.stringify(text);
  const lines = [
    "# Written by ctl metrics credentials: one job per node, each checking the node's certificate by its node ID.",
    "global:",
    `  scrape_interval: ${intervalSeconds}s`,
    targets.length === 0 ? "scrape_configs: []" : "scrape_configs:",
  ];
  for (const t of targets) {
    lines.push(
      `  - job_name: ${q(`nodecore-${t.nodeId}`)}`,
      "    scheme: https",
      "    tls_config:",
      `      ca_file: ${q(files.ca)}`,
      `      cert_file: ${q(files.certificate)}`,
      `      key_file: ${q(files.key)}`,
      `      server_name: ${q(t.nodeId)}`,
      "    static_configs:",
      `      - targets: [${q(hostPort(t.address, t.port))}]`,
      `        labels: { node: ${q(t.nodeId)} }`,
    );
  }
  return `${lines.join("\n")}\n`;
}
