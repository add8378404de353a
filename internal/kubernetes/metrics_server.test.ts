import { describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { controllerFiles } from "./controller_files.ts";
import { METRICS_SERVER_PORT, METRICS_SERVER_USER, METRICS_SERVICE, metricsApiService, metricsEndpointSlice, metricsServiceObject } from "./metrics_server.ts";
import { createKubernetesPKI, issueCredential } from "./pki.ts";

describe("the Metrics API's objects", () => {
  const pki = createKubernetesPKI();

  test("the APIService trusts the Kubernetes CA for its serving certificate, never skips verification, and names the selectorless Service", () => {
    const api = metricsApiService(pki);
    expect(api.metadata.name).toBe("v1beta1.metrics.k8s.io");
    expect(api.spec).not.toHaveProperty("insecureSkipTLSVerify");
    expect(new X509Certificate(Buffer.from(api.spec.caBundle, "base64")).fingerprint256).toBe(pki.ca.certificate.fingerprint256);
    expect(api.spec.service).toEqual({ name: "metrics-server", namespace: "kube-system", port: 443 });
    const service = metricsServiceObject();
    expect(service.spec).not.toHaveProperty("selector");
    expect(service.spec.ports).toEqual([{ name: "https", port: 443, protocol: "TCP", targetPort: METRICS_SERVER_PORT }]);
  });

  test("the EndpointSlice lists every controller by address, sorted, and leaves out what Kubernetes refuses (loopback, not IPv4)", () => {
    const slice = metricsEndpointSlice(
      new Map([
        ["node-b", "10.77.0.12"],
        ["node-a", "10.77.0.11"],
        ["node-c", "127.0.0.21"],
        ["node-d", ""],
        ["node-e", "fd00::1"],
      ]),
    );
    expect(slice.metadata.labels["kubernetes.io/service-name"]).toBe(METRICS_SERVICE.name);
    expect(slice.endpoints).toEqual([
      { addresses: ["10.77.0.11"], nodeName: "node-a", conditions: { ready: true } },
      { addresses: ["10.77.0.12"], nodeName: "node-b", conditions: { ready: true } },
    ]);
    // The port's name is the Service's: the aggregator matches them.
    expect(slice.ports).toEqual([{ name: "https", port: METRICS_SERVER_PORT, protocol: "TCP" }]);
  });

  test("each controller's metrics-server serves as the Service's name and its own address, under the Kubernetes CA, and calls as its own user", () => {
    const files = controllerFiles(pki, {
      address: "10.77.0.11",
      apiserverUrl: "https://10.77.0.11:6443",
      etcd: { ca: pki.ca.certificate, client: issueCredential(pki.ca, { commonName: "etcd-client", kind: "client" }) },
    });
    const serving = new X509Certificate(files.metricsServerCert);
    expect(serving.checkHost("metrics-server.kube-system.svc")).toBe("metrics-server.kube-system.svc");
    expect(serving.checkIP("10.77.0.11")).toBe("10.77.0.11");
    expect(serving.verify(pki.ca.certificate.publicKey)).toBe(true);
    const kubeconfig = JSON.parse(files.metricsServerKubeconfig) as { clusters: { cluster: { server: string } }[]; users: { user: { "client-certificate-data": string } }[] };
    expect(kubeconfig.clusters[0]!.cluster.server).toBe("https://10.77.0.11:6443");
    const client = new X509Certificate(Buffer.from(kubeconfig.users[0]!.user["client-certificate-data"], "base64"));
    expect(client.subject).toBe(`CN=${METRICS_SERVER_USER}`);
    expect(client.verify(pki.ca.certificate.publicKey)).toBe(true);
  });
});
