// etcd's own metrics, read from the local member's client URL with the
// control plane's client certificate (etcd serves /metrics there, under
// its client certificate check), for the node's scrape (internal/metrics).

import { privateKeyPem } from "../pki/mod.ts";
import { ETCD_SERVER_NAME, type EtcdTls } from "./certificates.ts";

/** The most of etcd's text passed on (it is some 100 KiB; a member gone wrong could say more). */
export const MAX_ETCD_METRICS_BYTES = 4 * 1024 * 1024;

export async function fetchEtcdMetrics(clientUrl: string, tls: EtcdTls, signal: AbortSignal): Promise<string> {
  const response = await fetch(`${clientUrl}/metrics`, {
    signal,
    tls: {
      ca: tls.ca.toString(),
      cert: tls.certificate.toString(),
      key: privateKeyPem(tls.privateKey),
      serverName: ETCD_SERVER_NAME,
    },
  } as RequestInit);
  if (!response.ok) throw new Error(`etcd answered HTTP ${response.status} for /metrics`);
  const text = await response.text();
  if (text.length > MAX_ETCD_METRICS_BYTES) throw new Error(`etcd's metrics are ${text.length} bytes, more than ${MAX_ETCD_METRICS_BYTES}`);
  return text;
}
