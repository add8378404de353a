// The command lines of the controller's three components, after the
// upstream documentation's secure setup (and Metropolis's launcher, except
// where noted): Node,RBAC authorization, NodeRestriction admission, client
// certificates everywhere, service-account keys, and the service and pod
// networks. File names are controller_files.ts's, inside `dir`.
//
// Deliberate differences from Metropolis: the apiserver verifies kubelets'
// serving certificates (--kubelet-certificate-authority), and the
// front-proxy names only its own client.

import { join } from "node:path";
import { isLoopback } from "../rpc/mod.ts";
import { CONTROLLER_FILES, type ControllerFile } from "./controller_files.ts";
import { metricsServerArgs } from "./metrics_server.ts";
import { CLUSTER_DOMAIN, FRONT_PROXY_CLIENT, KUBERNETES_ETCD_PREFIX, SERVICE_CIDR } from "./pki.ts";

export const APISERVER_PORT = 6443;
export const CONTROLLER_MANAGER_PORT = 10257;
export const SCHEDULER_PORT = 10259;
/** The apiserver's own keys in etcd: apart from the curator's /nodecore/ and the PKI's /kubernetes/pki. */
export const APISERVER_ETCD_PREFIX = `${KUBERNETES_ETCD_PREFIX}registry`;
export const SERVICE_ACCOUNT_ISSUER = `https://kubernetes.default.svc.${CLUSTER_DOMAIN}`;

/**
 * Leader election of the controller-manager and the scheduler, lengthened
 * from upstream's 15 s lease, 10 s renew deadline and 2 s retry. A leader
 * that cannot renew its lease within the renew deadline exits (and is
 * restarted): on a loaded node, where the apiserver and etcd answer late,
 * the defaults made both restart about every two minutes (issue 46: 11 and
 * 10 restarts in 25 minutes of a 3-VM cluster). A 60 s lease renewed within
 * 40 s still lost it on a one-vCPU controller under TCG while the
 * controller-manager built its controllers, the apiserver unanswering for
 * over 40 s (1 and 2 restarts in two e2e runs of 2026-11-29): the lease is
 * 120 s and the renew deadline 100 s since. Election is kept on even with
 * one controller, since a second may be added at any time. The price: when a
 * controller node dies, or a component crashes, another (or the restarted
 * one, which has a new identity) takes over within the lease (120 s) rather
 * than 15 s. A component stopped on purpose (a role change, a reboot) gives
 * its lease up as it exits, so that its successor need not wait: the
 * scheduler always does, the controller-manager with
 * CONTROLLER_MANAGER_FEATURE_GATES.
 */
export const LEADER_ELECTION_FLAGS = ["--leader-elect=true", "--leader-elect-lease-duration=120s", "--leader-elect-renew-deadline=100s", "--leader-elect-retry-period=5s"] as const;

/**
 * ControllerManagerReleaseLeaderElectionLockOnExit (alpha since 1.36, off by
 * default): the controller-manager releases its lease when it stops, as the
 * scheduler does. Without it, a controller-manager restarted by a role
 * change waited out its predecessor's lease before any controller ran.
 */
export const CONTROLLER_MANAGER_FEATURE_GATES = "--feature-gates=ControllerManagerReleaseLeaderElectionLockOnExit=true";

/**
 * How long the apiserver's /healthz and /readyz wait for etcd: upstream's
 * 2 s is shorter than one raft election of the node's etcd (2.5 s election
 * timeout, internal/consensus SHARED_RAFT_TIMING), so every ordinary change
 * of raft leader, and every second-long stall of a loaded member, reported
 * `etcd failed`. Under TCG /readyz failed 12 of 42 reads of a loaded 3-VM
 * cluster, and the controller-manager gave up at its start on a /healthz
 * that said so (issue 46). Two election timeouts: an etcd that answers
 * nothing for 5 s is still unhealthy.
 */
export const ETCD_CHECK_TIMEOUT = "5s";

export interface ControllerFlagOptions {
  /** Where controller_files.ts wrote the files. */
  dir: string;
  /** The node's address: the components listen on it (nodes of a process cluster share one host). */
  address: string;
  /** The local etcd member's client URL. */
  etcdUrl: string;
}

const file = (dir: string, name: ControllerFile) => join(dir, CONTROLLER_FILES[name]);

export function apiserverArgs(o: ControllerFlagOptions): string[] {
  const f = (name: ControllerFile) => file(o.dir, name);
  return [
    `--advertise-address=${o.address}`,
    `--bind-address=${o.address}`,
    `--secure-port=${APISERVER_PORT}`,
    `--tls-cert-file=${f("apiserverCert")}`,
    `--tls-private-key-file=${f("apiserverKey")}`,
    `--client-ca-file=${f("ca")}`,
    "--authorization-mode=Node,RBAC",
    "--enable-admission-plugins=NodeRestriction",
    "--anonymous-auth=false",
    `--etcd-servers=${o.etcdUrl}`,
    `--etcd-cafile=${f("etcdCA")}`,
    `--etcd-certfile=${f("etcdClientCert")}`,
    `--etcd-keyfile=${f("etcdClientKey")}`,
    `--etcd-prefix=${APISERVER_ETCD_PREFIX}`,
    `--etcd-healthcheck-timeout=${ETCD_CHECK_TIMEOUT}`,
    `--etcd-readycheck-timeout=${ETCD_CHECK_TIMEOUT}`,
    `--kubelet-client-certificate=${f("kubeletClientCert")}`,
    `--kubelet-client-key=${f("kubeletClientKey")}`,
    `--kubelet-certificate-authority=${f("ca")}`,
    "--kubelet-preferred-address-types=InternalIP",
    `--service-account-issuer=${SERVICE_ACCOUNT_ISSUER}`,
    `--service-account-key-file=${f("serviceAccountPublic")}`,
    `--service-account-signing-key-file=${f("serviceAccountPrivate")}`,
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    `--requestheader-client-ca-file=${f("frontProxyCA")}`,
    `--requestheader-allowed-names=${FRONT_PROXY_CLIENT}`,
    "--requestheader-username-headers=X-Remote-User",
    "--requestheader-group-headers=X-Remote-Group",
    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
    `--proxy-client-cert-file=${f("frontProxyClientCert")}`,
    `--proxy-client-key-file=${f("frontProxyClientKey")}`,
    // An aggregated API (the Metrics API, metrics_server.ts) is reached at
    // its EndpointSlice's addresses, not its Service's ClusterIP: a
    // controller runs no kube-proxy unless it is a worker too.
    "--enable-aggregator-routing=true",
    "--profiling=false",
    // The apiserver keeps the `kubernetes` Service's endpoints at the
    // controllers' addresses, and refuses a loopback one. Nodes of a process
    // cluster share a host on 127.0.0.0/8 and run no pods that could use
    // the Service, so there the endpoints are left alone.
    ...(isLoopback(o.address) ? ["--endpoint-reconciler-type=none"] : []),
  ];
}

export function controllerManagerArgs(o: ControllerFlagOptions): string[] {
  const f = (name: ControllerFile) => file(o.dir, name);
  return [
    `--kubeconfig=${f("controllerManagerKubeconfig")}`,
    `--authentication-kubeconfig=${f("controllerManagerKubeconfig")}`,
    `--authorization-kubeconfig=${f("controllerManagerKubeconfig")}`,
    `--bind-address=${o.address}`,
    `--secure-port=${CONTROLLER_MANAGER_PORT}`,
    `--tls-cert-file=${f("controllerManagerCert")}`,
    `--tls-private-key-file=${f("controllerManagerKey")}`,
    `--client-ca-file=${f("ca")}`,
    `--requestheader-client-ca-file=${f("frontProxyCA")}`,
    `--root-ca-file=${f("ca")}`,
    `--service-account-private-key-file=${f("serviceAccountPrivate")}`,
    "--use-service-account-credentials=true",
    // Pod prefixes come from the curator alone (internal/clusternet): the
    // mesh's peers route exactly what the cluster's records say.
    "--allocate-node-cidrs=false",
    `--service-cluster-ip-range=${SERVICE_CIDR}`,
    ...LEADER_ELECTION_FLAGS,
    CONTROLLER_MANAGER_FEATURE_GATES,
    "--profiling=false",
  ];
}

/** metrics-server's, with this controller's files (metrics_server.ts says why each flag). */
export function controllerMetricsServerArgs(o: ControllerFlagOptions): string[] {
  const f = (name: ControllerFile) => file(o.dir, name);
  return metricsServerArgs(o.address, { kubeconfig: f("metricsServerKubeconfig"), servingCert: f("metricsServerCert"), servingKey: f("metricsServerKey"), ca: f("ca") });
}

export function schedulerArgs(o: ControllerFlagOptions): string[] {
  const f = (name: ControllerFile) => file(o.dir, name);
  return [
    `--kubeconfig=${f("schedulerKubeconfig")}`,
    `--authentication-kubeconfig=${f("schedulerKubeconfig")}`,
    `--authorization-kubeconfig=${f("schedulerKubeconfig")}`,
    `--bind-address=${o.address}`,
    `--secure-port=${SCHEDULER_PORT}`,
    `--tls-cert-file=${f("schedulerCert")}`,
    `--tls-private-key-file=${f("schedulerKey")}`,
    `--client-ca-file=${f("ca")}`,
    ...LEADER_ELECTION_FLAGS,
    "--profiling=false",
  ];
}
