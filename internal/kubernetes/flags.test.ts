// The components' command lines and the kubelet's configuration, golden:
// a change to any flag shows here, next to the reason in the builders.

import { describe, expect, test } from "bun:test";
import { apiserverArgs, controllerManagerArgs, controllerMetricsServerArgs, schedulerArgs } from "./controller_flags.ts";
import { kubeletArgs, kubeletConfig } from "./kubelet.ts";
import { proxyArgs, proxyConfig } from "./proxy.ts";
import { corefile, dnsArgs } from "./dns.ts";
import { dnsEndpointSlice, dnsServiceObject } from "./reconciler.ts";
import { createKubernetesPKI, issueKubeletCertificates } from "./pki.ts";
import { generateKeyPair } from "../pki/mod.ts";

const options = { dir: "/run/k", address: "10.77.0.11", etcdUrl: "https://127.0.0.1:2379" };

describe("the controller's command lines (golden)", () => {
  test("kube-apiserver", () => {
    expect(apiserverArgs(options)).toEqual([
      "--advertise-address=10.77.0.11",
      "--bind-address=10.77.0.11",
      "--secure-port=6443",
      "--tls-cert-file=/run/k/apiserver.crt",
      "--tls-private-key-file=/run/k/apiserver.key",
      "--client-ca-file=/run/k/ca.crt",
      "--authorization-mode=Node,RBAC",
      "--enable-admission-plugins=NodeRestriction",
      "--anonymous-auth=false",
      "--etcd-servers=https://127.0.0.1:2379",
      "--etcd-cafile=/run/k/etcd-ca.crt",
      "--etcd-certfile=/run/k/apiserver-etcd-client.crt",
      "--etcd-keyfile=/run/k/apiserver-etcd-client.key",
      "--etcd-prefix=/kubernetes/registry",
      "--etcd-healthcheck-timeout=5s",
      "--etcd-readycheck-timeout=5s",
      "--kubelet-client-certificate=/run/k/apiserver-kubelet-client.crt",
      "--kubelet-client-key=/run/k/apiserver-kubelet-client.key",
      "--kubelet-certificate-authority=/run/k/ca.crt",
      "--kubelet-preferred-address-types=InternalIP",
      "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
      "--service-account-key-file=/run/k/sa.pub",
      "--service-account-signing-key-file=/run/k/sa.key",
      "--service-cluster-ip-range=10.96.0.0/12",
      "--requestheader-client-ca-file=/run/k/front-proxy-ca.crt",
      "--requestheader-allowed-names=front-proxy-client",
      "--requestheader-username-headers=X-Remote-User",
      "--requestheader-group-headers=X-Remote-Group",
      "--requestheader-extra-headers-prefix=X-Remote-Extra-",
      "--proxy-client-cert-file=/run/k/front-proxy-client.crt",
      "--proxy-client-key-file=/run/k/front-proxy-client.key",
      "--enable-aggregator-routing=true",
      "--profiling=false",
    ]);
  });

  test("kube-controller-manager", () => {
    expect(controllerManagerArgs(options)).toEqual([
      "--kubeconfig=/run/k/controller-manager.kubeconfig",
      "--authentication-kubeconfig=/run/k/controller-manager.kubeconfig",
      "--authorization-kubeconfig=/run/k/controller-manager.kubeconfig",
      "--bind-address=10.77.0.11",
      "--secure-port=10257",
      "--tls-cert-file=/run/k/controller-manager.crt",
      "--tls-private-key-file=/run/k/controller-manager.key",
      "--client-ca-file=/run/k/ca.crt",
      "--requestheader-client-ca-file=/run/k/front-proxy-ca.crt",
      "--root-ca-file=/run/k/ca.crt",
      "--service-account-private-key-file=/run/k/sa.key",
      "--use-service-account-credentials=true",
      "--allocate-node-cidrs=false",
      "--service-cluster-ip-range=10.96.0.0/12",
      "--leader-elect=true",
      "--leader-elect-lease-duration=120s",
      "--leader-elect-renew-deadline=100s",
      "--leader-elect-retry-period=5s",
      "--feature-gates=ControllerManagerReleaseLeaderElectionLockOnExit=true",
      "--profiling=false",
    ]);
  });

  test("kube-scheduler", () => {
    expect(schedulerArgs(options)).toEqual([
      "--kubeconfig=/run/k/scheduler.kubeconfig",
      "--authentication-kubeconfig=/run/k/scheduler.kubeconfig",
      "--authorization-kubeconfig=/run/k/scheduler.kubeconfig",
      "--bind-address=10.77.0.11",
      "--secure-port=10259",
      "--tls-cert-file=/run/k/scheduler.crt",
      "--tls-private-key-file=/run/k/scheduler.key",
      "--client-ca-file=/run/k/ca.crt",
      "--leader-elect=true",
      "--leader-elect-lease-duration=120s",
      "--leader-elect-renew-deadline=100s",
      "--leader-elect-retry-period=5s",
      "--profiling=false",
    ]);
  });

  test("metrics-server: one kubeconfig for its informers and its delegated checks, kubelets verified against the Kubernetes CA, never insecure", () => {
    const args = controllerMetricsServerArgs(options);
    expect(args).toEqual([
      "--kubeconfig=/run/k/metrics-server.kubeconfig",
      "--authentication-kubeconfig=/run/k/metrics-server.kubeconfig",
      "--authorization-kubeconfig=/run/k/metrics-server.kubeconfig",
      "--bind-address=10.77.0.11",
      "--secure-port=4443",
      "--tls-cert-file=/run/k/metrics-server.crt",
      "--tls-private-key-file=/run/k/metrics-server.key",
      "--kubelet-certificate-authority=/run/k/ca.crt",
      "--kubelet-preferred-address-types=InternalIP",
      "--kubelet-use-node-status-port",
      "--metric-resolution=15s",
      "--profiling=false",
    ]);
    expect(args.some((a) => /insecure/.test(a))).toBe(false);
  });
});

describe("the kubelet (golden)", () => {
  const pki = createKubernetesPKI();
  const key = generateKeyPair();
  const { server, client } = issueKubeletCertificates(pki, "node-00000000000000aa", key.publicKey, ["10.77.0.13"]);
  const node = {
    nodeId: "node-00000000000000aa",
    address: "10.77.0.13",
    containerdSocket: "/ephemeral/containerd/containerd.sock",
    cgroupRoot: "/nodecore-runtime/pods",
    podLogsDir: "/data/kubernetes/pod-logs",
    apiserver: "https://10.77.0.11:6443",
    ca: pki.ca.certificate,
    server,
    client,
    key: key.privateKey,
  };

  test("command line", () => {
    expect(kubeletArgs("/run/kubelet", "/data/kubernetes/kubelet", node)).toEqual([
      "--config=/run/kubelet/kubelet-config.json",
      "--kubeconfig=/run/kubelet/kubelet.kubeconfig",
      "--root-dir=/data/kubernetes/kubelet",
      "--hostname-override=node-00000000000000aa",
      "--node-ip=10.77.0.13",
      "--image-credential-provider-config=/run/kubelet/credential-providers.json",
      "--image-credential-provider-bin-dir=/run/kubelet/credential-providers",
    ]);
  });

  test("KubeletConfiguration", () => {
    expect(kubeletConfig("/run/kubelet", node)).toEqual({
      apiVersion: "kubelet.config.k8s.io/v1beta1",
      kind: "KubeletConfiguration",
      address: "10.77.0.13",
      port: 10250,
      readOnlyPort: 0,
      healthzBindAddress: "10.77.0.13",
      healthzPort: 10248,
      tlsCertFile: "/run/kubelet/kubelet.crt",
      tlsPrivateKeyFile: "/run/kubelet/kubelet.key",
      tlsMinVersion: "VersionTLS12",
      rotateCertificates: false,
      serverTLSBootstrap: false,
      authentication: { anonymous: { enabled: false }, webhook: { enabled: true }, x509: { clientCAFile: "/run/kubelet/ca.crt" } },
      authorization: { mode: "Webhook" },
      containerRuntimeEndpoint: "unix:///ephemeral/containerd/containerd.sock",
      cgroupRoot: "/nodecore-runtime/pods",
      clusterDomain: "cluster.local",
      clusterDNS: ["10.96.0.10"],
      resolvConf: "/run/kubelet/resolv.conf",
      podLogsDir: "/data/kubernetes/pod-logs",
      failSwapOn: false,
      registerNode: true,
      evictionHard: { "memory.available": "50Mi", "nodefs.available": "5%", "imagefs.available": "5%", "nodefs.inodesFree": "5%" },
    });
  });
});

describe("kube-proxy", () => {
  test("nftables mode over the curator's cluster CIDR, named for the node, health on its address, conntrack left alone", () => {
    const config = proxyConfig("/run/k", { nodeId: "node-00000000000000aa", address: "10.77.0.12" });
    expect(config).toMatchObject({
      kind: "KubeProxyConfiguration",
      mode: "nftables",
      clusterCIDR: "10.244.0.0/16",
      detectLocalMode: "ClusterCIDR",
      hostnameOverride: "node-00000000000000aa",
      healthzBindAddress: "10.77.0.12:10256",
      metricsBindAddress: "127.0.0.1:10249",
      clientConnection: { kubeconfig: "/run/k/kube-proxy.kubeconfig" },
      conntrack: { maxPerCore: 0, min: 0 },
    });
    expect(proxyArgs("/run/k")).toEqual(["--config=/run/k/kube-proxy-config.json"]);
  });
});

describe("cluster DNS", () => {
  test("CoreDNS answers the cluster domain on the node's address, ready when synced, forwarding only where the node has resolvers", () => {
    const closed = corefile("/run/k", { address: "10.77.0.12", upstreams: [] });
    expect(closed).toContain("    bind 10.77.0.12\n");
    expect(closed).toContain("    ready 10.77.0.12:8181\n");
    expect(closed).toContain("    kubernetes cluster.local in-addr.arpa ip6.arpa {\n        kubeconfig /run/k/cluster-dns.kubeconfig\n");
    expect(closed).not.toContain("forward");
    expect(corefile("/run/k", { address: "10.77.0.12", upstreams: ["10.77.0.1", "10.77.0.2"] })).toContain("    forward . 10.77.0.1 10.77.0.2\n    loop\n");
    expect(dnsArgs("/run/k")).toEqual(["-conf", "/run/k/Corefile"]);
  });

  test("kube-dns has no selector and asks each pod's own node; its endpoints are the workers with an IPv4 address, by node", () => {
    const service = dnsServiceObject();
    expect(service.spec).toMatchObject({ clusterIP: "10.96.0.10", internalTrafficPolicy: "Local" });
    expect("selector" in service.spec).toBe(false);
    const slice = dnsEndpointSlice(
      new Map([
        ["node-b", "10.77.0.13"],
        ["node-a", "10.77.0.12"],
        ["node-c", ""],
      ]),
    );
    expect(slice.metadata.labels["kubernetes.io/service-name"]).toBe("kube-dns");
    expect(slice.endpoints).toEqual([
      { addresses: ["10.77.0.12"], nodeName: "node-a", conditions: { ready: true } },
      { addresses: ["10.77.0.13"], nodeName: "node-b", conditions: { ready: true } },
    ]);
  });
});
