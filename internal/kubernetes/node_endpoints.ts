// An EndpointSlice of nodes' own addresses, for a Service without a
// selector whose endpoints are processes the nodes run themselves, not
// pods: the cluster DNS (each worker's CoreDNS, reconciler.ts) and the
// Metrics API (each controller's metrics-server, metrics_server.ts).

import type { DiscoveryV1Api } from "@kubernetes/client-node";
import { isIPv4 } from "../network/mod.ts";
import { isLoopback } from "../rpc/mod.ts";
import { absentAs, sameVersion } from "./api_client.ts";

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

export type NodeEndpointSlice = ReturnType<typeof nodeEndpointSlice>;

/**
 * Keeps the slice equal to `wanted`: creates it when it is absent, and
 * replaces it when its endpoints (address, node) or its ports differ.
 * Returns what changed; `nodes` names the endpoints in those lines
 * ("workers", "controllers").
 */
export async function keepNodeEndpointSlice(discovery: DiscoveryV1Api, wanted: NodeEndpointSlice, nodes: string): Promise<string[]> {
  const { namespace, name } = wanted.metadata;
  const existing = await discovery.readNamespacedEndpointSlice({ namespace, name }).catch(absentAs(`EndpointSlice ${namespace}/${name}`));
  if (!existing) {
    await discovery.createNamespacedEndpointSlice({ namespace, body: wanted });
    return [`created EndpointSlice ${name} (${wanted.endpoints.length} ${nodes})`];
  }
  const shape = (
    endpoints: readonly { addresses: readonly string[]; nodeName?: string | undefined }[],
    ports: readonly { name?: string | undefined; port?: number | undefined; protocol?: string | undefined }[],
  ) => JSON.stringify([endpoints.map((e) => [e.addresses, e.nodeName]), ports.map((p) => [p.name, p.port, p.protocol])]);
  if (shape(existing.endpoints ?? [], existing.ports ?? []) === shape(wanted.endpoints, wanted.ports)) return [];
  await discovery.replaceNamespacedEndpointSlice({ namespace, name, body: { ...wanted, metadata: { ...wanted.metadata, ...sameVersion(existing.metadata) } } });
  return [`EndpointSlice ${name}: ${wanted.endpoints.map((e) => `${e.nodeName}=${e.addresses[0]}`).join(" ") || `no ${nodes}`}`];
}
