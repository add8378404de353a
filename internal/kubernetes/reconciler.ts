// The reconciler: the cluster's base objects, applied through the
// apiserver with @kubernetes/client-node as the node core's admin identity
// once the apiserver is ready, and again whenever a controller starts.
//
//   nodecore:owner-cluster-admin          user nodecore:owner → cluster-admin
//                                         (ctl kubeconfig's identity)
//   nodecore:apiserver-kubelet-api-admin  user kube-apiserver-kubelet-client →
//                                         system:kubelet-api-admin (logs, exec,
//                                         metrics on kubelets)
//
//   nodecore:cluster-dns                  user nodecore:cluster-dns → ClusterRole
//                                         nodecore:cluster-dns (list/watch Services,
//                                         Namespaces, EndpointSlices)
//
// And the cluster DNS Service (reconcileDns): kube-system/kube-dns at
// 10.96.0.10, without a selector, whose EndpointSlice lists every worker's
// own DNS server at its address; internalTrafficPolicy Local sends each
// pod to its own node's.
//
// And the Node objects follow the cluster's records (pruneNodes): a Node
// whose nodecore node is gone, or no longer holds the kubernetes-worker
// role, is deleted, so that `kubectl get nodes` lists the workers and no
// one else (its kubelet is stopped by its own node when the role goes).
//
// Every controller runs it; the objects are the same everywhere, and each
// step (read, create when absent, replace when different, delete) is safe
// to race.
// A binding whose role changed is deleted and created again: Kubernetes
// does not let a binding's roleRef change.
//
// @kubernetes/client-node is loaded on first use, so that nodes that never
// run a controller never pay for loading it. Its requests go through bun's
// fetch with the client certificate given directly (apiHttp below): the
// library's own HTTP layer hands its TLS settings to undici as a
// dispatcher, which bun's fetch ignores, so the CA and the client
// certificate would never be used.

import { isIPv4 } from "../network/mod.ts";
import { privateKeyPem, toPem } from "../pki/mod.ts";
import { APISERVER_KUBELET_CLIENT, DNS_USER, OWNER_USER, type KubernetesPKI } from "./pki.ts";
import { CLUSTER_DNS_IP } from "./kubelet.ts";

type ClientNode = typeof import("@kubernetes/client-node");

/** One request's deadline. */
const REQUEST_TIMEOUT_MS = 10_000;

/** client-node's configuration for one apiserver, as the node core's admin identity, over bun's fetch. */
function apiConfiguration(k8s: ClientNode, server: string, pki: KubernetesPKI) {
  const tls = { ca: toPem(pki.ca.certificate), cert: toPem(pki.admin.certificate), key: privateKeyPem(pki.admin.privateKey) };
  const httpApi = k8s.wrapHttpLibrary({
    async send(request) {
      const response = await fetch(request.getUrl(), {
        method: request.getHttpMethod().toString(),
        headers: request.getHeaders(),
        body: request.getBody() as string | undefined,
        signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
        tls,
      } as RequestInit);
      const headers: Record<string, string> = {};
      response.headers.forEach((value, name) => (headers[name] = value));
      const body = Buffer.from(await response.arrayBuffer());
      return new k8s.ResponseContext(response.status, headers, {
        text: async () => body.toString(),
        binary: async () => body,
        stream: () => null,
      });
    },
  });
  return k8s.createConfiguration({ baseServer: new k8s.ServerConfiguration(server, {}), httpApi });
}

const RBAC_GROUP = "rbac.authorization.k8s.io";

export interface ClusterRoleBindingSpec {
  name: string;
  user: string;
  clusterRole: string;
}

/** What the cluster DNS server reads: the names it answers come from these. */
export const DNS_ROLE = "nodecore:cluster-dns";
export const DNS_ROLE_RULES = [
  { apiGroups: [""], resources: ["services", "namespaces"], verbs: ["list", "watch"] },
  { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
];

export const BASE_BINDINGS: readonly ClusterRoleBindingSpec[] = [
  { name: "nodecore:owner-cluster-admin", user: OWNER_USER, clusterRole: "cluster-admin" },
  { name: "nodecore:apiserver-kubelet-api-admin", user: APISERVER_KUBELET_CLIENT, clusterRole: "system:kubelet-api-admin" },
  { name: "nodecore:cluster-dns", user: DNS_USER, clusterRole: DNS_ROLE },
];

const LABELS = { "app.kubernetes.io/managed-by": "nodecore" };

export function bindingObject(spec: ClusterRoleBindingSpec) {
  return {
    apiVersion: `${RBAC_GROUP}/v1`,
    kind: "ClusterRoleBinding",
    metadata: { name: spec.name, labels: LABELS },
    subjects: [{ kind: "User", apiGroup: RBAC_GROUP, name: spec.user }],
    roleRef: { kind: "ClusterRole", apiGroup: RBAC_GROUP, name: spec.clusterRole },
  };
}

export type ReconcileAction = "created" | "unchanged" | "replaced";

/** HTTP status of a client-node error, if it has one. */
/** A replacement's resourceVersion: the one the existing object has, so that a concurrent change fails the replace instead of being lost. */
function sameVersion(metadata: { resourceVersion?: string | undefined } | undefined): { resourceVersion?: string } {
  return metadata?.resourceVersion !== undefined ? { resourceVersion: metadata.resourceVersion } : {};
}

function statusOf(error: unknown): number | undefined {
  const code = (error as { code?: unknown }).code;
  return typeof code === "number" ? code : undefined;
}

/**
 * Deletes the Node objects whose names are not in `workers` (the node IDs
 * that hold the kubernetes-worker role); returns the names deleted.
 */
export async function pruneNodes(server: string, pki: KubernetesPKI, workers: ReadonlySet<string>): Promise<string[]> {
  const k8s = await import("@kubernetes/client-node");
  const core = new k8s.CoreV1Api(apiConfiguration(k8s, server, pki));
  const deleted: string[] = [];
  for (const node of (await core.listNode()).items) {
    const name = node.metadata?.name;
    if (!name || workers.has(name)) continue;
    try {
      await core.deleteNode({ name });
      deleted.push(name);
    } catch (error) {
      if (statusOf(error) !== 404) throw new Error(`could not delete Node ${name}: ${(error as Error).message}`, { cause: error });
    }
  }
  return deleted;
}

/** Applies DNS_ROLE and BASE_BINDINGS against the apiserver at `server`; returns what it did to each. */
export async function reconcile(server: string, pki: KubernetesPKI): Promise<Record<string, ReconcileAction>> {
  const k8s = await import("@kubernetes/client-node");
  const rbac = new k8s.RbacAuthorizationV1Api(apiConfiguration(k8s, server, pki));
  const done: Record<string, ReconcileAction> = {};
  const role = { apiVersion: `${RBAC_GROUP}/v1`, kind: "ClusterRole", metadata: { name: DNS_ROLE, labels: LABELS }, rules: DNS_ROLE_RULES };
  const existingRole = await rbac.readClusterRole({ name: DNS_ROLE }).catch((error: unknown) => {
    if (statusOf(error) === 404) return undefined;
    throw new Error(`could not read ClusterRole ${DNS_ROLE}: ${(error as Error).message}`, { cause: error });
  });
  if (!existingRole) {
    await rbac.createClusterRole({ body: role });
    done[DNS_ROLE] = "created";
  } else if (JSON.stringify(existingRole.rules?.map((r) => ({ apiGroups: r.apiGroups, resources: r.resources, verbs: r.verbs }))) !== JSON.stringify(DNS_ROLE_RULES)) {
    await rbac.replaceClusterRole({ name: DNS_ROLE, body: { ...role, metadata: { ...role.metadata, ...sameVersion(existingRole.metadata) } } });
    done[DNS_ROLE] = "replaced";
  } else {
    done[DNS_ROLE] = "unchanged";
  }
  for (const spec of BASE_BINDINGS) {
    const wanted = bindingObject(spec);
    let existing: Awaited<ReturnType<typeof rbac.readClusterRoleBinding>> | undefined;
    try {
      existing = await rbac.readClusterRoleBinding({ name: spec.name });
    } catch (error) {
      if (statusOf(error) !== 404) throw new Error(`could not read ClusterRoleBinding ${spec.name}: ${(error as Error).message}`, { cause: error });
    }
    if (!existing) {
      await rbac.createClusterRoleBinding({ body: wanted });
      done[spec.name] = "created";
      continue;
    }
    const same =
      existing.roleRef.name === spec.clusterRole &&
      existing.roleRef.kind === "ClusterRole" &&
      existing.subjects?.length === 1 &&
      existing.subjects[0]!.kind === "User" &&
      existing.subjects[0]!.name === spec.user;
    if (same) {
      done[spec.name] = "unchanged";
      continue;
    }
    await rbac.deleteClusterRoleBinding({ name: spec.name });
    await rbac.createClusterRoleBinding({ body: wanted });
    done[spec.name] = "replaced";
  }
  return done;
}

/** The cluster DNS Service: kube-system/kube-dns at CLUSTER_DNS_IP, answered by each node's own server. */
export const DNS_SERVICE = { namespace: "kube-system", name: "kube-dns", slice: "kube-dns-nodecore" } as const;

export function dnsServiceObject() {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: DNS_SERVICE.name, namespace: DNS_SERVICE.namespace, labels: { ...LABELS, "k8s-app": "kube-dns" } },
    spec: {
      clusterIP: CLUSTER_DNS_IP,
      // No selector: the endpoints are the workers' own DNS servers (dnsEndpointSlice),
      // and each pod asks the one on its node.
      internalTrafficPolicy: "Local",
      ports: [
        { name: "dns", port: 53, protocol: "UDP", targetPort: 53 },
        { name: "dns-tcp", port: 53, protocol: "TCP", targetPort: 53 },
      ],
    },
  };
}

/** The kube-dns Service's endpoints: each worker's DNS server at its address (id → address). */
export function dnsEndpointSlice(workers: ReadonlyMap<string, string>) {
  return {
    apiVersion: "discovery.k8s.io/v1",
    kind: "EndpointSlice",
    metadata: {
      name: DNS_SERVICE.slice,
      namespace: DNS_SERVICE.namespace,
      labels: { ...LABELS, "kubernetes.io/service-name": DNS_SERVICE.name, "endpointslice.kubernetes.io/managed-by": "nodecore" },
    },
    addressType: "IPv4",
    endpoints: [...workers]
      .filter(([, address]) => isIPv4(address))
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
      .map(([id, address]) => ({ addresses: [address], nodeName: id, conditions: { ready: true } })),
    ports: [
      { name: "dns", port: 53, protocol: "UDP" },
      { name: "dns-tcp", port: 53, protocol: "TCP" },
    ],
  };
}

/**
 * Keeps the kube-dns Service and its endpoints equal to what the cluster's
 * records say (`workers`: id → address); returns what changed, if anything.
 */
export async function reconcileDns(server: string, pki: KubernetesPKI, workers: ReadonlyMap<string, string>): Promise<string[]> {
  const k8s = await import("@kubernetes/client-node");
  const configuration = apiConfiguration(k8s, server, pki);
  const core = new k8s.CoreV1Api(configuration);
  const discovery = new k8s.DiscoveryV1Api(configuration);
  const changed: string[] = [];
  const absent = (what: string) => (error: unknown) => {
    if (statusOf(error) === 404) return undefined;
    throw new Error(`could not read ${what}: ${(error as Error).message}`, { cause: error });
  };
  const { namespace, name, slice } = DNS_SERVICE;
  const service = await core.readNamespacedService({ namespace, name }).catch(absent(`Service ${namespace}/${name}`));
  if (service && service.spec?.clusterIP !== CLUSTER_DNS_IP) {
    // A Service's ClusterIP cannot change: one at another address goes.
    await core.deleteNamespacedService({ namespace, name });
    changed.push(`deleted Service ${name} at ${service.spec?.clusterIP}`);
  }
  if (!service || service.spec?.clusterIP !== CLUSTER_DNS_IP) {
    await core.createNamespacedService({ namespace, body: dnsServiceObject() });
    changed.push(`created Service ${name} at ${CLUSTER_DNS_IP}`);
  }
  const wanted = dnsEndpointSlice(workers);
  const existing = await discovery.readNamespacedEndpointSlice({ namespace, name: slice }).catch(absent(`EndpointSlice ${namespace}/${slice}`));
  if (!existing) {
    await discovery.createNamespacedEndpointSlice({ namespace, body: wanted });
    changed.push(`created EndpointSlice ${slice} (${wanted.endpoints.length} workers)`);
  } else {
    const now = JSON.stringify((existing.endpoints ?? []).map((e) => [e.addresses, e.nodeName]));
    if (now !== JSON.stringify(wanted.endpoints.map((e) => [e.addresses, e.nodeName]))) {
      await discovery.replaceNamespacedEndpointSlice({ namespace, name: slice, body: { ...wanted, metadata: { ...wanted.metadata, ...sameVersion(existing.metadata) } } });
      changed.push(`EndpointSlice ${slice}: ${wanted.endpoints.map((e) => `${e.nodeName}=${e.addresses[0]}`).join(" ") || "no workers"}`);
    }
  }
  return changed;
}
