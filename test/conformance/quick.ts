// The quick subset: a fixed list of [Conformance] tests that covers what a
// user touches on the first day, for CI and for a first look at a cluster.
// Each is named as the suite names it (e2e.test --list-conformance-tests's
// codename); cli.ts focuses on exactly these.

export const QUICK_TESTS: readonly string[] = [
  // pods and containers
  "[sig-node] Pods should be submitted and removed [Conformance] [NodeConformance]",
  "[sig-node] Containers should be able to override the image's default command and arguments [Conformance] [NodeConformance]",
  "[sig-node] Downward API should provide pod name, namespace and IP address as env vars [Conformance] [NodeConformance]",
  // ConfigMaps, Secrets, projected volumes
  "[sig-storage] ConfigMap should be consumable from pods in volume [Conformance] [NodeConformance]",
  "[sig-node] ConfigMap should be consumable via environment variable [Conformance] [NodeConformance]",
  "[sig-storage] Secrets should be consumable from pods in volume [Conformance] [NodeConformance]",
  "[sig-storage] Projected combined should project all components that make up the projection API [Projection] [Conformance] [NodeConformance]",
  // Services and the pod network
  "[sig-network] Services should serve a basic endpoint from pods [Conformance]",
  // the cluster DNS: its probes run dig and getent in agnhost and in glibc-dns-testing (images.ts)
  "[sig-network] DNS should provide DNS for the cluster [Conformance]",
  "[sig-network] Networking Granular Checks: Pods should function for intra-pod communication: http [Conformance] [NodeConformance]",
  // Deployments and ReplicaSets
  "[sig-apps] Deployment RollingUpdateDeployment should delete old pods and create new ones [Conformance]",
  "[sig-apps] ReplicaSet should serve a basic image on each replica with a public image [Conformance]",
  // kubectl logs, exec, port-forward
  "[sig-cli] Kubectl logs logs should be able to retrieve and filter logs [Conformance]",
  "[sig-node] Pods should support remote command execution over websockets [Conformance] [NodeConformance]",
  "[sig-cli] Kubectl client Proxy server should support proxy with --port 0 [Conformance]",
  // RBAC and service accounts
  "[sig-auth] ServiceAccounts should mount an API token into pods [Conformance]",
  "[sig-auth] SubjectReview should support SubjectReview API operations [Conformance]",
  // the API machinery
  "[sig-api-machinery] CustomResourceDefinition resources [Privileged:ClusterAdmin] Simple CustomResourceDefinition creating/deleting custom resource definition objects works [Conformance]",
  "[sig-api-machinery] Watchers should be able to restart watching from the last resource version observed by the previous watch [Conformance]",
  "[sig-api-machinery] ResourceQuota should create a ResourceQuota and ensure its status is promptly calculated. [Conformance]",
  "[sig-api-machinery] Garbage collector should delete pods created by rc when not orphaning [Conformance]",
];

/**
 * A ginkgo focus that matches exactly these names. Ginkgo matches it
 * against a spec's full text, which starts with a space (the suite's
 * top-level container has no text), so a name starts at the start or
 * after a space.
 */
export function focusOf(names: readonly string[]): string {
  return names.map((n) => `(?:^|\\s)${n.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}$`).join("|");
}
