// An EndpointSlice of nodes' own addresses, for a Service without a
// selector whose endpoints are processes the nodes run themselves, not
// pods: the cluster DNS (each worker's CoreDNS, reconciler.ts) and the
// Metrics API (each controller's metrics-server, metrics_server.ts).

import { isIPv4 } from "../network/mod.ts";
import { isLoopback } from "../rpc/mod.ts";

const LABELS = { "app.kubernetes.io/managed-by": "nodecore" };

export interface SlicePort {
  name: string;
  port: number;
  protocol: "TCP" | "UDP";
}

/**
 * The slice `name` of the Service `service` in `namespace`: one ready
 * endpoint per node (node ID → address), sorted by ID. Addresses
 * Kubernetes refuses in an EndpointSlice are left out: none (a node that
 * has reported none), not IPv4, or loopback (a process cluster's nodes
 * share a host on 127.0.0.0/8).
 */
export function nodeEndpointSlice(where: { namespace: string; service: string; name: string }, nodes: ReadonlyMap<string, string>, ports: readonly SlicePort[]) {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: where.name,
      namespace: where.namespace,
      labels: { ...LABELS, "kubernetes.io/service-name": where.service, "endpointslice.kubernetes.io/managed-by": "nodecore" },
    },
    addressType: "IPv4",
    endpoints: [...nodes]
      .filter(([, address]) => isIPv4(address) && !isLoopback(address))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([id, address]) => ({ addresses: [address], nodeName: id, conditions: { ready: true } })),
    ports: [...ports],
  };
}
