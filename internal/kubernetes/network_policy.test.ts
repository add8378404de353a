// The NetworkPolicy enforcer's part of a worker (network_policy.ts): its
// identity, its command line and files, and the bridge's sysctls. That it
// enforces is the cluster e2e's (test/e2e/network_policy.ts), on real
// workers.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { X509Certificate } from "node:crypto";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { parseKubeconfig } from "./kubeconfig.ts";
import { createKubernetesPKI, issueKubeletCertificates, NETWORK_POLICY_USER } from "./pki.ts";
import { BASE_BINDINGS, BASE_ROLES } from "./reconciler.ts";
import { BridgeFilterError, enableBridgeFilter, NETWORK_POLICY_ROLE, networkPolicyArgs, networkPolicyFiles, networkPolicyReady } from "./network_policy.ts";

const pki = createKubernetesPKI();
const dir = tempDir("network-policy-");
afterAll(() => dir[Symbol.dispose]());

describe("the NetworkPolicy enforcer", () => {
  const key = generateKeyPair();
  const { networkPolicy } = issueKubeletCertificates(pki, "node-0123456789abcdef", key.publicKey, ["10.77.0.13"]);

  test("runs as nodecore:network-policy, a client certificate over the kubelet's key, which the reconciler lets read pods, namespaces and policies only", () => {
    expect(networkPolicy.subject).toBe(`CN=${NETWORK_POLICY_USER}`);
    expect(networkPolicy.checkIssued(pki.ca.certificate)).toBe(true);
    expect(networkPolicy.publicKey.export({ format: "der", type: "spki" })).toEqual(key.publicKey.export({ format: "der", type: "spki" }));
    expect(BASE_BINDINGS).toContainEqual({ name: "nodecore:network-policy", user: NETWORK_POLICY_USER, clusterRole: NETWORK_POLICY_ROLE });
    const role = BASE_ROLES.find((r) => r.name === NETWORK_POLICY_ROLE)!;
    const reads = role.rules.filter((r) => r.verbs.includes("watch")).flatMap((r) => r.resources);
    expect(reads.sort()).toEqual(["namespaces", "networkpolicies", "pods"]);
    // Nothing but events is written, and no secret is read.
    expect(role.rules.filter((r) => r.verbs.some((v) => ["create", "update", "patch", "delete"].includes(v))).flatMap((r) => r.resources)).toEqual(["events"]);
    expect(role.rules.flatMap((r) => r.resources)).not.toContain("secrets");
  });

  test("its kubeconfig names the chosen apiserver and its identity; its flags name the Node and keep its endpoint on loopback", () => {
    const files = networkPolicyFiles({ nodeId: "node-0123456789abcdef", apiserver: "https://10.77.0.11:6443", ca: pki.ca.certificate, certificate: networkPolicy, key: key.privateKey });
    const parsed = parseKubeconfig(files.kubeconfig);
    expect(parsed.server).toBe("https://10.77.0.11:6443");
    expect(new X509Certificate(parsed.certificate).subject).toBe(`CN=${NETWORK_POLICY_USER}`);
    const args = networkPolicyArgs("/run/kubelet", "node-0123456789abcdef");
    expect(args).toContain("--kubeconfig=/run/kubelet/network-policy.kubeconfig");
    expect(args).toContain("--node-name=node-0123456789abcdef");
    const listen = args.find((a) => a.startsWith("--listen="))!;
    expect(listen).toMatch(/^--listen=127\.0\.0\.1:\d+$/);
    expect(networkPolicyReady()).toBe(`http://${listen.slice("--listen=".length)}/readyz`);
    // Fail closed is upstream's default, and nothing here turns it off.
    expect(args.some((a) => a.startsWith("--fail-open"))).toBe(false);
  });

  test("bridged packets are sent through the IP hooks, and a node without br_netfilter is told so", () => {
    const procSys = join(dir.path, "sys");
    mkdirSync(join(procSys, "net", "bridge"), { recursive: true });
    enableBridgeFilter(procSys);
    for (const name of ["bridge-nf-call-iptables", "bridge-nf-call-ip6tables"]) expect(readFileSync(join(procSys, "net", "bridge", name), "utf8")).toBe("1\n");
    const missing = join(dir.path, "no-bridge");
    expect(() => enableBridgeFilter(missing)).toThrow(BridgeFilterError);
    expect(() => enableBridgeFilter(missing)).toThrow(/cannot set net\.bridge\.bridge-nf-call-iptables \(is br_netfilter loaded\?\)/);
  });
});
