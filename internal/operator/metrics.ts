// ctl metrics: a metrics reader's credentials and a Prometheus configuration
// for the cluster's nodes, and one node's metrics read with the owner's own
// certificate (internal/metrics serves them on the node management port).

import { writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { METRICS_PATH, prometheusConfig } from "../metrics/mod.ts";
import { NODE_MANAGEMENT_PORT } from "../nodemgmt/client/mod.ts";
import { privateKeyPem } from "../pki/mod.ts";
import { hostPort } from "../rpc/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { listNodes, type CallSettings } from "./nodes.ts";
import { withFailover } from "./connection.ts";
import { certifyNewKey, writePemFiles } from "./client_credentials.ts";

/** The files `ctl metrics credentials` writes into its directory. */
export const READER_FILES = { ca: "ca.pem", certificate: "reader.pem", key: "reader.key", config: "prometheus.yml" } as const;

export interface WrittenReader {
  dir: string;
  /** The nodes the configuration scrapes (UP ones: the others have no address yet). */
  targets: string[];
  config: string;
}

/**
 * Has the curator issue a metrics reader certificate for a key made here,
 * and writes it, its key, the cluster CA and a Prometheus configuration
 * with one job per UP node into `dir`.
 */
export async function writeMetricsReader(credentials: OwnerCredentials, settings: CallSettings, dir: string, name: string, intervalSeconds = 15): Promise<WrittenReader> {
  const reader = await certifyNewKey((publicKey) => withFailover(Management, credentials, (m) => m.getMetricsCredentials({ publicKey, name }, settings), settings.progress));
  const nodes = (await listNodes(credentials, settings)).filter((n) => n.state === "UP" && n.address);
  const absolute = resolve(dir);
  const files = writePemFiles(absolute, READER_FILES, reader);
  const config = join(absolute, READER_FILES.config);
  writeFileSync(
    config,
    prometheusConfig(
      nodes.map((n) => ({ nodeId: n.id, address: n.address, port: NODE_MANAGEMENT_PORT })),
      files,
      intervalSeconds,
    ),
  );
  return { dir: absolute, targets: nodes.map((n) => n.id), config };
}

/** One node's metrics text, read with the owner's certificate over mutual TLS. */
export async function readNodeMetrics(credentials: OwnerCredentials, settings: CallSettings, nodeId: string): Promise<string> {
  const node = (await listNodes(credentials, settings)).find((n) => n.id === nodeId);
  if (!node) throw new OperatorError(`no node ${JSON.stringify(nodeId.slice(0, 80))} in the cluster (ctl node list shows them)`);
  if (!node.address) throw new OperatorError(`node ${nodeId} has no address yet (it is ${node.state})`);
  const url = `https://${hostPort(node.address, NODE_MANAGEMENT_PORT)}${METRICS_PATH}`;
  let response: Response;
  try {
    response = await fetch(url, {
      signal: AbortSignal.timeout(settings.timeoutMs),
      tls: { ca: credentials.ca.toString(), cert: credentials.certificate.toString(), key: privateKeyPem(credentials.key.privateKey), serverName: nodeId },
    } as RequestInit);
  } catch (err) {
    throw new OperatorError(`could not read ${nodeId}'s metrics at ${url}: ${(err as Error).message}`);
  }
  const body = await response.text();
  if (!response.ok) throw new OperatorError(`${nodeId} answered HTTP ${response.status}: ${body.trim().slice(0, 200)}`);
  return body;
}
