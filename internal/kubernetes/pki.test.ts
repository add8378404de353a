import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createPublicKey, type X509Certificate } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { startTestCluster, type TestCluster } from "../curator/test_cluster.ts";
import { generateKeyPair, toPem } from "../pki/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { buildKubeconfig, parseKubeconfig } from "./kubeconfig.ts";
import {
  ADMIN_USER,
  API_SERVICE_IP,
  KubernetesPKIError,
  PKI_KEY,
  createKubernetesPKI,
  decodeKubernetesPKI,
  encodeKubernetesPKI,
  ensureKubernetesPKI,
  kubernetesKeys,
  issueApiserverCertificate,
  issueKubeletCertificates,
  serviceAccountPublicKeyPem,
} from "./pki.ts";

const pki = createKubernetesPKI();
const dir = tempDir("kube-pki-");
afterAll(() => dir[Symbol.dispose]());

let fileCounter = 0;
function pemFile(certificate: X509Certificate): string {
  const path = join(dir.path, `${fileCounter++}.crt`);
  writeFileSync(path, toPem(certificate));
  return path;
}

/** `openssl verify` of a certificate against one CA, for a purpose; returns its exit code and output. */
function opensslVerify(certificate: X509Certificate, ca: X509Certificate, purpose?: "sslserver" | "sslclient"): { ok: boolean; output: string } {
  const args = ["openssl", "verify", "-CAfile", pemFile(ca), ...(purpose ? ["-purpose", purpose] : []), pemFile(certificate)];
  const result = Bun.spawnSync(args);
  return { ok: result.exitCode === 0, output: result.stdout.toString() + result.stderr.toString() };
}

describe("the Kubernetes PKI", () => {
  test("the control plane's client certificates chain to the Kubernetes CA, for client use only, with the RBAC users' names", () => {
    const clients = [
      [pki.apiserverKubeletClient, "CN=kube-apiserver-kubelet-client"],
      [pki.controllerManager, "CN=system:kube-controller-manager"],
      [pki.scheduler, "CN=system:kube-scheduler"],
      [pki.admin, `O=system:masters\nCN=${ADMIN_USER}`],
    ] as const;
    for (const [credential, subject] of clients) {
      expect(credential.certificate.subject).toBe(subject);
      expect(opensslVerify(credential.certificate, pki.ca.certificate, "sslclient").ok).toBe(true);
      const asServer = opensslVerify(credential.certificate, pki.ca.certificate, "sslserver");
      expect(asServer.ok).toBe(false);
      expect(asServer.output).toContain("unsuitable certificate purpose");
      // Each key is the one the certificate names.
      expect(createPublicKey(credential.privateKey).export({ format: "der", type: "spki" })).toEqual(credential.certificate.publicKey.export({ format: "der", type: "spki" }));
    }
  });

  test("the front proxy's client chains to its own CA and not to the Kubernetes CA", () => {
    expect(pki.frontProxyClient.certificate.subject).toBe("CN=front-proxy-client");
    expect(opensslVerify(pki.frontProxyClient.certificate, pki.frontProxyCA.certificate, "sslclient").ok).toBe(true);
    expect(opensslVerify(pki.frontProxyClient.certificate, pki.ca.certificate).ok).toBe(false);
    expect(pki.frontProxyCA.certificate.fingerprint256).not.toBe(pki.ca.certificate.fingerprint256);
  });

  test("the service-account key is ECDSA P-256 and its public half is PEM", () => {
    expect(pki.serviceAccountKey.asymmetricKeyType).toBe("ec");
    expect(pki.serviceAccountKey.asymmetricKeyDetails?.namedCurve).toBe("prime256v1");
    const pub = serviceAccountPublicKeyPem(pki);
    expect(pub).toStartWith("-----BEGIN PUBLIC KEY-----");
    const parsed = Bun.spawnSync(["openssl", "pkey", "-pubin", "-noout", "-text"], { stdin: Buffer.from(pub) });
    expect(parsed.stdout.toString()).toContain("prime256v1");
  });

  test("the apiserver's serving certificate names the service IP, the service DNS names, localhost and the node", () => {
    const { certificate } = issueApiserverCertificate(pki, ["10.77.0.11"]);
    expect(opensslVerify(certificate, pki.ca.certificate, "sslserver").ok).toBe(true);
    const names = certificate.subjectAltName ?? "";
    for (const expected of [
      "DNS:kubernetes",
      "DNS:kubernetes.default.svc",
      "DNS:kubernetes.default.svc.cluster.local",
      "DNS:localhost",
      `IP Address:${API_SERVICE_IP}`,
      "IP Address:127.0.0.1",
      "IP Address:10.77.0.11",
    ]) {
      expect(names).toContain(expected);
    }
    expect(certificate.checkIP("10.77.0.11")).toBe("10.77.0.11");
    expect(certificate.checkIP("10.77.0.12")).toBeUndefined();
  });

  test("a kubelet's certificates are system:node:<id> in system:nodes, over the node's own key", () => {
    const key = generateKeyPair();
    const { server, client } = issueKubeletCertificates(pki, "node-0123456789abcdef", key.publicKey, ["10.77.0.13"]);
    for (const certificate of [server, client]) {
      expect(certificate.subject).toBe("O=system:nodes\nCN=system:node:node-0123456789abcdef");
      expect(certificate.publicKey.export({ format: "der", type: "spki" })).toEqual(key.publicKey.export({ format: "der", type: "spki" }));
    }
    expect(opensslVerify(server, pki.ca.certificate, "sslserver").ok).toBe(true);
    expect(opensslVerify(client, pki.ca.certificate, "sslclient").ok).toBe(true);
    expect(opensslVerify(client, pki.ca.certificate, "sslserver").ok).toBe(false);
    expect(server.checkIP("10.77.0.13")).toBe("10.77.0.13");
  });

  test("what is stored reads back the same, and a damaged record is named", () => {
    const decoded = decodeKubernetesPKI(encodeKubernetesPKI(pki));
    expect(decoded.ca.certificate.fingerprint256).toBe(pki.ca.certificate.fingerprint256);
    expect(decoded.admin.privateKey.export({ format: "der", type: "pkcs8" })).toEqual(pki.admin.privateKey.export({ format: "der", type: "pkcs8" }));
    expect(decoded.serviceAccountKey.export({ format: "der", type: "pkcs8" })).toEqual(pki.serviceAccountKey.export({ format: "der", type: "pkcs8" }));
    const broken = JSON.parse(encodeKubernetesPKI(pki)) as Record<string, unknown>;
    delete broken.scheduler;
    expect(() => decodeKubernetesPKI(JSON.stringify(broken))).toThrow(new KubernetesPKIError(`the Kubernetes PKI in etcd (${PKI_KEY}) lacks scheduler`));
    expect(() => decodeKubernetesPKI("{")).toThrow(KubernetesPKIError);
  });

  test("a kubeconfig carries the server, the CA and the user's credentials, and reads back", () => {
    const text = buildKubeconfig({ server: "https://10.77.0.11:6443", ca: pki.ca.certificate, certificate: pki.admin.certificate, privateKey: pki.admin.privateKey, user: ADMIN_USER });
    const parsed = parseKubeconfig(text);
    expect(parsed.server).toBe("https://10.77.0.11:6443");
    expect(parsed.ca).toBe(toPem(pki.ca.certificate));
    expect(parsed.certificate).toBe(toPem(pki.admin.certificate));
    expect(createPublicKey(parsed.privateKey).export({ format: "der", type: "spki" })).toEqual(pki.admin.certificate.publicKey.export({ format: "der", type: "spki" }));
  });
});

describe("the Kubernetes PKI in etcd", () => {
  let cluster: TestCluster;
  beforeAll(async () => {
    cluster = await startTestCluster();
  });
  afterAll(async () => {
    await cluster?.close();
  });

  test("concurrent callers create it exactly once and all get the same one", async () => {
    const results = await Promise.all(Array.from({ length: 5 }, () => ensureKubernetesPKI(kubernetesKeys(cluster.etcd))));
    expect(results.filter((r) => r.created)).toHaveLength(1);
    const fingerprints = new Set(results.map((r) => r.pki.ca.certificate.fingerprint256));
    expect(fingerprints.size).toBe(1);
    const again = await ensureKubernetesPKI(kubernetesKeys(cluster.etcd));
    expect(again.created).toBe(false);
    expect(again.pki.ca.certificate.fingerprint256).toBe([...fingerprints][0]!);
    // Where clusters made before the key space was handed out keep it: one key, whole.
    expect(decodeKubernetesPKI((await cluster.etcd.get(PKI_KEY).string())!).ca.certificate.fingerprint256).toBe([...fingerprints][0]!);
    expect(PKI_KEY).toBe("/kubernetes/pki");
  });
});
