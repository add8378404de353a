// The Metrics API: metrics-server (sigs.k8s.io/metrics-server, built in
// image/upstream) on every controller, beside its apiserver, so that
// `kubectl top` answers and a HorizontalPodAutoscaler can scale.
//
//   kubectl top / HPA ─▶ kube-apiserver ─(aggregation layer, front-proxy
//   client certificate)─▶ APIService v1beta1.metrics.k8s.io
//     ─▶ Service kube-system/metrics-server (no selector)
//     ─▶ EndpointSlice: every controller's address, METRICS_SERVER_PORT
//     ─▶ metrics-server ─(its own client certificate, verifying each
//        kubelet's serving certificate against the Kubernetes CA)─▶
//        https://<node's InternalIP>:10250/metrics/resource
//
// Why this way, and not upstream's Deployment:
//  - the controllers run the control plane as processes, not pods, and
//    need no worker role; metrics-server is one more of those processes;
//  - the apiserver reaches it by the EndpointSlice's addresses
//    (--enable-aggregator-routing), so a controller needs no kube-proxy;
//  - every kubelet's serving certificate is issued by the cluster from the
//    Kubernetes CA (pki.ts), so metrics-server verifies kubelets properly:
//    no --kubelet-insecure-tls, no approver for self-signed certificates;
//  - the APIService carries the CA that issued metrics-server's serving
//    certificate (caBundle), not insecureSkipTLSVerify.
//
// metrics-server has no leader election: with two controllers, each
// kubelet is scraped twice per resolution, and the apiserver asks either.

import { toPem } from "../pki/mod.ts";
import { absentAs, clientConfiguration, sameVersion } from "./api_client.ts";
import { keepNodeEndpointSlice, nodeEndpointSlice } from "./node_endpoints.ts";
import type { KubernetesPKI } from "./pki.ts";

/** metrics-server's port on each controller's address (upstream's own default before 0.6; 10250 is the kubelet's). */
export const METRICS_SERVER_PORT = 4443;
/** Its identity to the apiserver and to kubelets (its client certificate's name). */
export const METRICS_SERVER_USER = "nodecore:metrics-server";
/** How often it scrapes every kubelet. */
export const METRIC_RESOLUTION = "15s";
/** The Service the APIService names, and the name its serving certificate must carry. */
export const METRICS_SERVICE = { namespace: "kube-system", name: "metrics-server", slice: "metrics-server-nodecore", port: 443, portName: "https" } as const;
export const METRICS_SERVICE_DNS_NAME = `${METRICS_SERVICE.name}.${METRICS_SERVICE.namespace}.svc`;
export const METRICS_API = { group: "metrics.k8s.io", version: "v1beta1", name: "v1beta1.metrics.k8s.io" } as const;

/** The files metricsServerArgs names, inside the controller's directory (controller_files.ts writes them). */
export interface MetricsServerFiles {
  kubeconfig: string;
  servingCert: string;
  servingKey: string;
  ca: string;
}

/**
 * metrics-server's command line. Outside a pod it has no in-cluster
 * configuration, so the same kubeconfig serves for its informers, its
 * delegated authentication (TokenReviews, and the front-proxy settings it
 * reads from kube-system/extension-apiserver-authentication) and its
 * delegated authorization (SubjectAccessReviews).
 */
export function metricsServerArgs(address: string, files: MetricsServerFiles): string[] {
  return [
    `--kubeconfig=${files.kubeconfig}`,
    `--authentication-kubeconfig=${files.kubeconfig}`,
    `--authorization-kubeconfig=${files.kubeconfig}`,
    `--bind-address=${address}`,
    `--secure-port=${METRICS_SERVER_PORT}`,
    `--tls-cert-file=${files.servingCert}`,
    `--tls-private-key-file=${files.servingKey}`,
    // Kubelets by the address their serving certificate names (pki.ts: the node's addresses), verified against the CA that issued it.
    `--kubelet-certificate-authority=${files.ca}`,
    "--kubelet-preferred-address-types=InternalIP",
    "--kubelet-use-node-status-port",
    `--metric-resolution=${METRIC_RESOLUTION}`,
    "--profiling=false",
  ];
}

const LABELS = { "app.kubernetes.io/managed-by": "nodecore" };
const RBAC_GROUP = "rbac.authorization.k8s.io";

/** What metrics-server reads: Nodes and Pods, and each kubelet's resource metrics (which the kubelet asks the apiserver about). */
export const METRICS_SERVER_ROLE = "nodecore:metrics-server";
export const METRICS_SERVER_ROLE_RULES = [
  { apiGroups: [""], resources: ["nodes/metrics"], verbs: ["get"] },
  { apiGroups: [""], resources: ["pods", "nodes"], verbs: ["get", "list", "watch"] },
];
/**
 * Who may read the Metrics API: Kubernetes' view, edit and admin roles
 * take these rules in (their aggregation labels), as upstream's manifests
 * have it.
 */
export const METRICS_READER_ROLE = "system:aggregated-metrics-reader";
export const METRICS_READER_RULES = [{ apiGroups: [METRICS_API.group], resources: ["pods", "nodes"], verbs: ["get", "list", "watch"] }];
export const METRICS_READER_LABELS = {
  "rbac.authorization.k8s.io/aggregate-to-view": "true",
  "rbac.authorization.k8s.io/aggregate-to-edit": "true",
  "rbac.authorization.k8s.io/aggregate-to-admin": "true",
};

/** The bindings metrics-server needs: its role, and Kubernetes' own role for delegated authentication and authorization. */
export const METRICS_SERVER_BINDINGS = [
  { name: "nodecore:metrics-server", user: METRICS_SERVER_USER, clusterRole: METRICS_SERVER_ROLE },
  { name: "nodecore:metrics-server:auth-delegator", user: METRICS_SERVER_USER, clusterRole: "system:auth-delegator" },
] as const;

/** In kube-system: metrics-server reads the front-proxy settings from extension-apiserver-authentication with Kubernetes' own Role. */
export function authReaderRoleBinding() {
  return {
    apiVersion: `${RBAC_GROUP}/v1`,
    kind: "RoleBinding",
    metadata: { name: "nodecore:metrics-server:auth-reader", namespace: "kube-system", labels: LABELS },
    subjects: [{ kind: "User", apiGroup: RBAC_GROUP, name: METRICS_SERVER_USER }],
    roleRef: { kind: "Role", apiGroup: RBAC_GROUP, name: "extension-apiserver-authentication-reader" },
  };
}

export function metricsServiceObject() {
  return {
    apiVersion: "v1",
    kind: "Service",
    metadata: { name: METRICS_SERVICE.name, namespace: METRICS_SERVICE.namespace, labels: LABELS },
    // No selector: the endpoints are the controllers' own processes (metricsEndpointSlice).
    spec: { ports: [{ name: METRICS_SERVICE.portName, port: METRICS_SERVICE.port, protocol: "TCP", targetPort: METRICS_SERVER_PORT }] },
  };
}

/**
 * The Service's endpoints: every controller's metrics-server (node ID →
 * address). Kubernetes refuses loopback endpoints, so the controllers of a
 * process cluster (which share a host on 127.0.0.0/8 and run no kubelets
 * to scrape) are left out, as the apiserver's own endpoints are
 * (controller_flags.ts).
 */
export function metricsEndpointSlice(controllers: ReadonlyMap<string, string>) {
  return nodeEndpointSlice({ namespace: METRICS_SERVICE.namespace, service: METRICS_SERVICE.name, name: METRICS_SERVICE.slice }, controllers, [
    { name: METRICS_SERVICE.portName, port: METRICS_SERVER_PORT, protocol: "TCP" },
  ]);
}

/** The APIService that sends metrics.k8s.io to the Service, trusting the Kubernetes CA for its serving certificate. */
export function metricsApiService(pki: KubernetesPKI) {
  return {
    apiVersion: "apiregistration.k8s.io/v1",
    kind: "APIService",
    metadata: { name: METRICS_API.name, labels: LABELS },
    spec: {
      service: { name: METRICS_SERVICE.name, namespace: METRICS_SERVICE.namespace, port: METRICS_SERVICE.port },
      group: METRICS_API.group,
      version: METRICS_API.version,
      caBundle: Buffer.from(toPem(pki.ca.certificate)).toString("base64"),
      groupPriorityMinimum: 100,
      versionPriority: 100,
    },
  };
}

async function apis(server: string, pki: KubernetesPKI) {
  const k8s = await import("@kubernetes/client-node");
  const configuration = clientConfiguration(k8s, server, { ca: pki.ca.certificate, certificate: pki.admin.certificate, privateKey: pki.admin.privateKey });
  return {
    core: new k8s.CoreV1Api(configuration),
    discovery: new k8s.DiscoveryV1Api(configuration),
    rbac: new k8s.RbacAuthorizationV1Api(configuration),
    registration: new k8s.ApiregistrationV1Api(configuration),
  };
}

/**
 * What metrics-server needs before it starts (it reads the front-proxy
 * settings at its start, and without them exits): the auth-reader
 * RoleBinding. The cluster roles and bindings are the base objects'
 * (reconciler.ts). Returns what changed.
 */
export async function reconcileMetricsAccess(server: string, pki: KubernetesPKI): Promise<string[]> {
  const { rbac } = await apis(server, pki);
  const { namespace } = METRICS_SERVICE;
  const reader = authReaderRoleBinding();
  const binding = await rbac.readNamespacedRoleBinding({ namespace, name: reader.metadata.name }).catch(absentAs(`RoleBinding ${namespace}/${reader.metadata.name}`));
  const sameBinding = binding?.roleRef.name === reader.roleRef.name && binding.subjects?.length === 1 && binding.subjects[0]!.name === METRICS_SERVER_USER;
  if (!sameBinding) {
    // A binding's roleRef cannot change: a different one goes.
    if (binding) await rbac.deleteNamespacedRoleBinding({ namespace, name: reader.metadata.name });
    await rbac.createNamespacedRoleBinding({ namespace, body: reader });
    return [`${binding ? "replaced" : "created"} RoleBinding ${reader.metadata.name}`];
  }
  return [];
}

/**
 * The route to metrics-server, as the functions above say: the Service,
 * its EndpointSlice (the controllers the cluster's records name: node ID →
 * address) and the APIService. Made once a metrics-server serves
 * (service_controller.ts): an APIService that names nothing serving is
 * unavailable, and while it is, the apiserver's discovery is partial, the
 * garbage collector and namespace deletion wait on it, and each turn of
 * its availability rebuilds the apiserver's OpenAPI documents (a minute of
 * a TCG controller's CPU). Returns what changed.
 */
export async function reconcileMetricsRoute(server: string, pki: KubernetesPKI, controllers: ReadonlyMap<string, string>): Promise<string[]> {
  const { core, discovery, registration } = await apis(server, pki);
  const changed: string[] = [];
  const { namespace, name } = METRICS_SERVICE;

  const service = await core.readNamespacedService({ namespace, name }).catch(absentAs(`Service ${namespace}/${name}`));
  const wantedService = metricsServiceObject();
  const port = service?.spec?.ports?.length === 1 ? service.spec.ports[0] : undefined;
  const sameService = service && !service.spec?.selector && port?.name === METRICS_SERVICE.portName && port.port === METRICS_SERVICE.port && String(port.targetPort) === String(METRICS_SERVER_PORT);
  if (!sameService) {
    if (service) await core.deleteNamespacedService({ namespace, name });
    await core.createNamespacedService({ namespace, body: wantedService });
    changed.push(`${service ? "replaced" : "created"} Service ${name}`);
  }

  changed.push(...(await keepNodeEndpointSlice(discovery, metricsEndpointSlice(controllers), "controllers")));

  const wantedApi = metricsApiService(pki);
  const api = await registration.readAPIService({ name: METRICS_API.name }).catch(absentAs(`APIService ${METRICS_API.name}`));
  const s = api?.spec;
  const sameApi =
    s?.service?.name === name &&
    s.service.namespace === namespace &&
    s.service.port === METRICS_SERVICE.port &&
    s.caBundle === wantedApi.spec.caBundle &&
    !s.insecureSkipTLSVerify &&
    s.groupPriorityMinimum === wantedApi.spec.groupPriorityMinimum &&
    s.versionPriority === wantedApi.spec.versionPriority;
  if (!api) {
    await registration.createAPIService({ body: wantedApi });
    changed.push(`created APIService ${METRICS_API.name}`);
  } else if (!sameApi) {
    await registration.replaceAPIService({ name: METRICS_API.name, body: { ...wantedApi, metadata: { ...wantedApi.metadata, ...sameVersion(api.metadata) } } });
    changed.push(`replaced APIService ${METRICS_API.name}`);
  }
  return changed;
}
