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
//   nodecore:volume-provisioners          group nodecore:volume-provisioners (each
//                                         worker's provisioner) → ClusterRole
//                                         nodecore:volume-provisioner (PVs, claims,
//                                         their events, CSIStorageCapacity)
//   nodecore:metrics-server               user nodecore:metrics-server → ClusterRole
//                                         nodecore:metrics-server (Nodes, Pods, each
//                                         kubelet's metrics), and → system:auth-delegator;
//                                         ClusterRole system:aggregated-metrics-reader,
//                                         aggregated into view, edit and admin
//                                         (metrics_server.ts keeps the Metrics API's
//                                         other objects)
//   nodecore:network-policy               user nodecore:network-policy (every
//                                         worker's enforcer) → ClusterRole
//                                         nodecore:network-policy (list/watch Pods,
//                                         Namespaces, NetworkPolicies; events)
//
// And persistent volumes' objects (reconcileStorage): the StorageClass
// `local`, the cluster's default (WaitForFirstConsumer, expandable, Delete),
// and the CSIDriver of the workers' volume plugin (csi.ts), which tells the
// scheduler to heed each node's CSIStorageCapacity.
//
// And the cluster DNS Service (reconcileDns): kube-system/kube-dns at
// 10.96.0.10, without a selector, whose EndpointSlice lists every worker's
// own DNS server at its address; internalTrafficPolicy Local sends each
// pod to its own node's.
//
// And the Node objects follow the cluster's records (reconcileNodes): a Node
// whose nodecore node is gone, or no longer holds the kubernetes-worker
// role, is deleted, so that `kubectl get nodes` lists the workers and no
// one else (its kubelet is stopped by its own node when the role goes);
// and a worker's Node that `ctl node poweroff` cordoned is uncordoned once
// the node is back and Ready (node_cordon.ts).
//
// Every controller runs it; the objects are the same everywhere, and each
// step (read, create when absent, replace when different, delete) is safe
// to race.
// A binding whose role changed is deleted and created again: Kubernetes
// does not let a binding's roleRef change.
//
// The client's configuration is api_client.ts's, as the node core's admin.

import { absentAs, clientConfiguration, sameVersion, statusOf } from "./api_client.ts";
import { APISERVER_KUBELET_CLIENT, DNS_USER, OWNER_USER, VOLUMES_GROUP, type KubernetesPKI } from "./pki.ts";
import { CSI_DRIVER } from "./csi.ts";
import { backFromPowerOff, CORDONED_BY_ANNOTATION, uncordonPatch } from "./node_cordon.ts";
import { CLUSTER_DNS_IP } from "./kubelet.ts";
import { keepNodeEndpointSlice, nodeEndpointSlice } from "./node_endpoints.ts";
import { NETWORK_POLICY_BINDING, NETWORK_POLICY_ROLE, NETWORK_POLICY_ROLE_RULES } from "./network_policy.ts";
import { METRICS_READER_LABELS, METRICS_READER_ROLE, METRICS_READER_RULES, METRICS_SERVER_BINDINGS, METRICS_SERVER_ROLE, METRICS_SERVER_ROLE_RULES } from "./metrics_server.ts";

type ClientNode = typeof import("@kubernetes/client-node");

/** client-node's configuration for one apiserver, as the node core's admin identity. */
function apiConfiguration(k8s: ClientNode, server: string, pki: KubernetesPKI) {
  return clientConfiguration(k8s, server, { ca: pki.ca.certificate, certificate: pki.admin.certificate, privateKey: pki.admin.privateKey });
}

const RBAC_GROUP = "rbac.authorization.k8s.io";

/** A binding of one subject: a user, or (group) a group. */
export interface ClusterRoleBindingSpec {
  name: string;
  user?: string;
  group?: string;
  clusterRole: string;
}

interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** What the cluster DNS server reads: the names it answers come from these. */
export const DNS_ROLE = "nodecore:cluster-dns";
export const DNS_ROLE_RULES = [
  { apiGroups: [""], resources: ["services", "namespaces"], verbs: ["list", "watch"] },
  { apiGroups: ["discovery.k8s.io"], resources: ["endpointslices"], verbs: ["list", "watch"] },
];

/**
 * What a worker's volume provisioner does (provisioner.ts): make, resize
 * and delete the PersistentVolumes of its node's claims, update the claims'
 * resize status, say why in events, and report its node's room.
 */
export const VOLUMES_ROLE = "nodecore:volume-provisioner";
export const VOLUMES_ROLE_RULES: PolicyRule[] = [
  { apiGroups: [""], resources: ["persistentvolumes"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] },
  { apiGroups: [""], resources: ["persistentvolumeclaims"], verbs: ["get", "list", "watch", "update", "patch"] },
  { apiGroups: [""], resources: ["persistentvolumeclaims/status"], verbs: ["update", "patch"] },
  { apiGroups: [""], resources: ["events"], verbs: ["create", "patch"] },
  { apiGroups: ["storage.k8s.io"], resources: ["storageclasses"], verbs: ["get", "list", "watch"] },
  { apiGroups: ["storage.k8s.io"], resources: ["csistoragecapacities"], verbs: ["get", "list", "watch", "create", "update", "patch", "delete"] },
];

/** The cluster roles the reconciler keeps, each with the labels it must carry besides LABELS (RBAC's aggregation labels). */
export const BASE_ROLES: readonly { name: string; rules: PolicyRule[]; labels?: Record<string, string> }[] = [
  { name: DNS_ROLE, rules: DNS_ROLE_RULES },
  { name: VOLUMES_ROLE, rules: VOLUMES_ROLE_RULES },
  { name: METRICS_SERVER_ROLE, rules: METRICS_SERVER_ROLE_RULES },
  { name: METRICS_READER_ROLE, rules: METRICS_READER_RULES, labels: METRICS_READER_LABELS },
  { name: NETWORK_POLICY_ROLE, rules: NETWORK_POLICY_ROLE_RULES },
];

export const BASE_BINDINGS: readonly ClusterRoleBindingSpec[] = [
  { name: "nodecore:owner-cluster-admin", user: OWNER_USER, clusterRole: "cluster-admin" },
  { name: "nodecore:apiserver-kubelet-api-admin", user: APISERVER_KUBELET_CLIENT, clusterRole: "system:kubelet-api-admin" },
  { name: "nodecore:cluster-dns", user: DNS_USER, clusterRole: DNS_ROLE },
  { name: "nodecore:volume-provisioners", group: VOLUMES_GROUP, clusterRole: VOLUMES_ROLE },
  ...METRICS_SERVER_BINDINGS,
  NETWORK_POLICY_BINDING,
];

const LABELS = { "app.kubernetes.io/managed-by": "nodecore" };

export function bindingObject(spec: ClusterRoleBindingSpec) {
  return {
    apiVersion: `${RBAC_GROUP}/v1`,
    kind: "ClusterRoleBinding",
    metadata: { name: spec.name, labels: LABELS },
    subjects: [spec.group !== undefined ? { kind: "Group", apiGroup: RBAC_GROUP, name: spec.group } : { kind: "User", apiGroup: RBAC_GROUP, name: spec.user! }],
    roleRef: { kind: "ClusterRole", apiGroup: RBAC_GROUP, name: spec.clusterRole },
  };
}

export type ReconcileAction = "created" | "unchanged" | "replaced";

/**
 * Deletes the Node objects whose names are not in `workers` (the node IDs
 * that hold the kubernetes-worker role), and uncordons the workers' Nodes
 * that a power-off cordoned and that are back (backFromPowerOff); returns
 * the names of each.
 */
export async function reconcileNodes(server: string, pki: KubernetesPKI, workers: ReadonlySet<string>): Promise<{ deleted: string[]; uncordoned: string[] }> {
  const k8s = await import("@kubernetes/client-node");
  const core = new k8s.CoreV1Api(apiConfiguration(k8s, server, pki));
  const deleted: string[] = [];
  const uncordoned: string[] = [];
  for (const node of (await core.listNode()).items) {
    const name = node.metadata?.name;
    if (!name) continue;
    if (workers.has(name)) {
      if (!backFromPowerOff(node)) continue;
      try {
        // JSON patch (the client's default for a patch): it tests the mark first.
        await core.patchNode({ name, body: uncordonPatch(node.metadata!.annotations![CORDONED_BY_ANNOTATION]!) });
        uncordoned.push(name);
      } catch (error) {
        // 422: the mark changed since it was read (the test op failed); 409: the Node changed under the patch; 404: the Node went. Either way, not ours to do now.
        const status = statusOf(error);
        if (status !== 404 && status !== 422 && status !== 409) throw new Error(`could not uncordon Node ${name}: ${(error as Error).message}`, { cause: error });
      }
      continue;
    }
    try {
      await core.deleteNode({ name });
      deleted.push(name);
    } catch (error) {
      if (statusOf(error) !== 404) throw new Error(`could not delete Node ${name}: ${(error as Error).message}`, { cause: error });
    }
  }
  return { deleted, uncordoned };
}

/**
 * Applies BASE_ROLES and BASE_BINDINGS against the apiserver at `server`;
 * returns what it did to each. Each object is its own chain of requests,
 * and the chains run at once: right after the apiserver's start, while
 * kubelets register and the controller-manager builds its informers, each
 * request waited seconds under TCG, and one after the other the owner's
 * kubectl was refused for 98 s after /readyz said ok (a 3-VM launch,
 * 2026-11-29). A binding may name a role made in the same pass: RBAC
 * takes a binding to a role that does not exist yet, and it applies once
 * the role does.
 */
export async function reconcile(server: string, pki: KubernetesPKI): Promise<Record<string, ReconcileAction>> {
  const k8s = await import("@kubernetes/client-node");
  const rbac = new k8s.RbacAuthorizationV1Api(apiConfiguration(k8s, server, pki));
  const role = async ({ name, rules, labels = {} }: (typeof BASE_ROLES)[number]): Promise<ReconcileAction> => {
    const wanted = { apiVersion: `${RBAC_GROUP}/v1`, kind: "ClusterRole", metadata: { name, labels: { ...LABELS, ...labels } }, rules };
    const existing = await rbac.readClusterRole({ name }).catch(absentAs(`ClusterRole ${name}`));
    if (!existing) {
      await rbac.createClusterRole({ body: wanted });
      return "created";
    }
    const sameRules = JSON.stringify(existing.rules?.map((r) => ({ apiGroups: r.apiGroups, resources: r.resources, verbs: r.verbs }))) === JSON.stringify(rules);
    if (sameRules && Object.entries(labels).every(([k, v]) => existing.metadata?.labels?.[k] === v)) return "unchanged";
    await rbac.replaceClusterRole({ name, body: { ...wanted, metadata: { ...wanted.metadata, ...sameVersion(existing.metadata) } } });
    return "replaced";
  };
  const binding = async (spec: ClusterRoleBindingSpec): Promise<ReconcileAction> => {
    const wanted = bindingObject(spec);
    const existing = await rbac.readClusterRoleBinding({ name: spec.name }).catch(absentAs(`ClusterRoleBinding ${spec.name}`));
    if (!existing) {
      await rbac.createClusterRoleBinding({ body: wanted });
      return "created";
    }
    const same =
      existing.roleRef.name === spec.clusterRole &&
      existing.roleRef.kind === "ClusterRole" &&
      existing.subjects?.length === 1 &&
      existing.subjects[0]!.kind === (spec.group !== undefined ? "Group" : "User") &&
      existing.subjects[0]!.name === (spec.group ?? spec.user);
    if (same) return "unchanged";
    await rbac.deleteClusterRoleBinding({ name: spec.name });
    await rbac.createClusterRoleBinding({ body: wanted });
    return "replaced";
  };
  const chains = [...BASE_BINDINGS.map(async (spec) => [spec.name, await binding(spec)] as const), ...BASE_ROLES.map(async (r) => [r.name, await role(r)] as const)];
  // Every chain is waited for before a failure is told, so that none still runs when the caller tries again.
  const settled = await Promise.allSettled(chains);
  const failed = settled.find((s): s is PromiseRejectedResult => s.status === "rejected");
  if (failed) throw failed.reason;
  const done: Record<string, ReconcileAction> = {};
  for (const s of settled) if (s.status === "fulfilled") done[s.value[0]] = s.value[1];
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
  return nodeEndpointSlice({ namespace: DNS_SERVICE.namespace, service: DNS_SERVICE.name, name: DNS_SERVICE.slice }, workers, [
    { name: "dns", port: 53, protocol: "UDP" },
    { name: "dns-tcp", port: 53, protocol: "TCP" },
  ]);
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
  const { namespace, name } = DNS_SERVICE;
  const service = await core.readNamespacedService({ namespace, name }).catch(absentAs(`Service ${namespace}/${name}`));
  if (service && service.spec?.clusterIP !== CLUSTER_DNS_IP) {
    // A Service's ClusterIP cannot change: one at another address goes.
    await core.deleteNamespacedService({ namespace, name });
    changed.push(`deleted Service ${name} at ${service.spec?.clusterIP}`);
  }
  if (!service || service.spec?.clusterIP !== CLUSTER_DNS_IP) {
    await core.createNamespacedService({ namespace, body: dnsServiceObject() });
    changed.push(`created Service ${name} at ${CLUSTER_DNS_IP}`);
  }
  changed.push(...(await keepNodeEndpointSlice(discovery, dnsEndpointSlice(workers), "workers")));
  return changed;
}

/** The cluster's default StorageClass: a volume on the data partition of the node a claim's pod lands on. */
export const STORAGE_CLASS = "local";
const DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class";

export function storageClassObject() {
  return {
    apiVersion: "storage.k8s.io/v1",
    kind: "StorageClass",
    // The default only when made: an owner who makes another class the default keeps it so.
    metadata: { name: STORAGE_CLASS, labels: LABELS, annotations: { [DEFAULT_CLASS_ANNOTATION]: "true" } },
    provisioner: CSI_DRIVER,
    reclaimPolicy: "Delete",
    // The claim waits for its pod: the scheduler picks the node (heeding each node's room), the volume is made there.
    volumeBindingMode: "WaitForFirstConsumer",
    allowVolumeExpansion: true,
  };
}

export function csiDriverObject() {
  return {
    apiVersion: "storage.k8s.io/v1",
    kind: "CSIDriver",
    metadata: { name: CSI_DRIVER, labels: LABELS },
    spec: { attachRequired: false, podInfoOnMount: false, storageCapacity: true, volumeLifecycleModes: ["Persistent"], fsGroupPolicy: "File", requiresRepublish: false },
  };
}

/**
 * Keeps the StorageClass `local` and the volume plugin's CSIDriver as
 * storageClassObject and csiDriverObject say, where it matters: fields
 * Kubernetes does not let change are changed by deleting and making the
 * object again (existing volumes keep working: they name the driver, not
 * these objects). Returns what changed.
 */
export async function reconcileStorage(server: string, pki: KubernetesPKI): Promise<string[]> {
  const k8s = await import("@kubernetes/client-node");
  const storage = new k8s.StorageV1Api(apiConfiguration(k8s, server, pki));
  const changed: string[] = [];
  const wantedClass = storageClassObject();
  const existingClass = await storage.readStorageClass({ name: STORAGE_CLASS }).catch(absentAs(`StorageClass ${STORAGE_CLASS}`));
  const sameClass =
    existingClass &&
    existingClass.provisioner === wantedClass.provisioner &&
    existingClass.reclaimPolicy === wantedClass.reclaimPolicy &&
    existingClass.volumeBindingMode === wantedClass.volumeBindingMode &&
    existingClass.allowVolumeExpansion === wantedClass.allowVolumeExpansion;
  if (!sameClass) {
    if (existingClass) await storage.deleteStorageClass({ name: STORAGE_CLASS });
    await storage.createStorageClass({ body: existingClass ? { ...wantedClass, metadata: { ...wantedClass.metadata, annotations: existingClass.metadata?.annotations ?? {} } } : wantedClass });
    changed.push(`${existingClass ? "replaced" : "created"} StorageClass ${STORAGE_CLASS}`);
  }
  const wantedDriver = csiDriverObject();
  const existingDriver = await storage.readCSIDriver({ name: CSI_DRIVER }).catch(absentAs(`CSIDriver ${CSI_DRIVER}`));
  const spec = existingDriver?.spec;
  const sameDriver =
    spec &&
    spec.attachRequired === wantedDriver.spec.attachRequired &&
    spec.podInfoOnMount === wantedDriver.spec.podInfoOnMount &&
    spec.storageCapacity === wantedDriver.spec.storageCapacity &&
    spec.fsGroupPolicy === wantedDriver.spec.fsGroupPolicy &&
    JSON.stringify(spec.volumeLifecycleModes) === JSON.stringify(wantedDriver.spec.volumeLifecycleModes);
  if (!sameDriver) {
    if (existingDriver) await storage.deleteCSIDriver({ name: CSI_DRIVER });
    await storage.createCSIDriver({ body: wantedDriver });
    changed.push(`${existingDriver ? "replaced" : "created"} CSIDriver ${CSI_DRIVER}`);
  }
  return changed;
}
