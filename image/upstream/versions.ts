// The upstream versions nodecore builds, one place. Changing one here and
// running `bun image/upstream/pin.ts` rewrites that wrapper module's go.mod
// and go.sum; commit both. The build (build.ts) refuses a go.mod that does not
// name the version given here.

/** Kubernetes: k8s.io/kubernetes, its staging modules at the matching v0.x. */
export const KUBERNETES_VERSION = "v1.37.2";

/**
 * etcd: the 3.6 line, the one kubeadm pairs with Kubernetes 1.34-1.36 and the
 * newest that still reads what 3.5 wrote (3.4's data needs 3.5 first).
 */
export const ETCD_VERSION = "v3.6.16";

/** containerd: the 2.3 long-term release (supported to 2028-04-30). */
export const CONTAINERD_VERSION = "v2.3.7";

/** runc: the version containerd 2.3.7's own CI tests (script/setup/runc-version). */
export const RUNC_VERSION = "v1.5.2";

/** The CNI reference plugins: bridge, host-local, loopback. */
export const CNI_PLUGINS_VERSION = "v1.9.1";

/** CoreDNS: the cluster DNS (internal/clusternet), with its kubernetes plugin. */
export const COREDNS_VERSION = "v1.15.0";

/** metrics-server: the Metrics API (`kubectl top`, autoscaling) on controllers (internal/kubernetes). */
export const METRICS_SERVER_VERSION = "v0.8.0";

/** kube-network-policies: NetworkPolicy enforced on every worker (internal/kubernetes, network_policy.ts). */
export const KUBE_NETWORK_POLICIES_VERSION = "v0.8.0";
