import { describe, expect, test } from "bun:test";
import type { NodeSummary } from "./format.ts";
import { kubernetesMinor, kubernetesSkew } from "./kubernetes_skew.ts";

function node(id: string, roles: string[], kubernetesVersion?: string): NodeSummary {
  return { id, state: "UP", address: "", roles, curator: false, labels: [], health: "HEALTHY", services: [], ...(kubernetesVersion ? { kubernetesVersion } : {}) } as NodeSummary;
}

describe("Kubernetes's version-skew policy for a cluster update", () => {
  test("versions are read as major and minor; anything else is no version", () => {
    expect(kubernetesMinor("v1.37.2")).toEqual({ major: 1, minor: 37 });
    expect(kubernetesMinor("v1.38.0-rc.1")).toEqual({ major: 1, minor: 38 });
    for (const bad of [undefined, "", "1.37.2", "v1.37", "v1.37.2 ", "v1.37.2\n", `v1.37.2-${"x".repeat(100)}`]) expect(kubernetesMinor(bad)).toBeUndefined();
  });

  const cluster = (controller: string, workers: string[]) => [node("c", ["consensus", "kubernetes-controller"], controller), ...workers.map((v, i) => node(`w${i}`, ["kubernetes-worker"], v))];

  test.each([
    ["the same minor, a newer patch", cluster("v1.37.2", ["v1.37.2"]), "v1.37.5"],
    ["the same minor, an older patch", cluster("v1.37.2", ["v1.37.2"]), "v1.37.0"],
    ["one minor newer", cluster("v1.37.2", ["v1.37.2", "v1.37.0"]), "v1.38.0"],
    ["one minor newer than a cluster half way there (a resumed update)", cluster("v1.38.0", ["v1.37.2"]), "v1.38.0"],
  ])("allows %s", (_, nodes, target) => {
    expect(kubernetesSkew(nodes, target)).toEqual({ unchecked: [] });
  });

  test("refuses a skipped minor, naming the oldest node and the minor to go through", () => {
    expect(kubernetesSkew(cluster("v1.37.2", ["v1.36.4"]), "v1.38.0").refusal).toBe(
      "the bundle carries Kubernetes v1.38.0, but w0 runs v1.36.4: that skips 1.37, and the new apiservers would meet v1.36.4's, more than one minor apart; update to a bundle with 1.37 first",
    );
    expect(kubernetesSkew(cluster("v1.36.4", ["v1.36.4"]), "v1.38.0").refusal).toMatch(/^the bundle carries Kubernetes v1\.38\.0, but c runs v1\.36\.4: that skips 1\.37/);
  });

  test("refuses a minor older than a node's, since its apiservers would meet newer kubelets", () => {
    expect(kubernetesSkew(cluster("v1.37.2", ["v1.37.2"]), "v1.36.4").refusal).toBe(
      "the bundle carries Kubernetes v1.36.4, a minor older than c's v1.37.2: the controllers go first, and their older apiservers would meet newer kubelets, which Kubernetes does not support",
    );
    expect(kubernetesSkew(cluster("v1.38.0", ["v1.37.2"]), "v1.37.9").refusal).toMatch(/a minor older than c's v1\.38\.0/);
    expect(kubernetesSkew(cluster("v1.37.2", ["v1.37.2"]), "v2.37.2").refusal).toBe("the bundle carries Kubernetes v2.37.2, another major version than c's v1.37.2");
  });

  test("a cluster without Kubernetes roles is not judged; what cannot be checked is named, not refused", () => {
    expect(kubernetesSkew([node("m", ["consensus"], "v1.30.0")], "v1.38.0")).toEqual({ unchecked: [] });
    expect(kubernetesSkew(cluster("v1.37.2", []), undefined)).toEqual({ unchecked: ["the bundle does not say which Kubernetes it carries: the version-skew policy is not checked"] });
    expect(kubernetesSkew([node("c", ["kubernetes-controller"]), node("w", ["kubernetes-worker"], "v1.37.2")], "v1.38.1")).toEqual({
      unchecked: ["c does not say which Kubernetes it runs: not checked against it"],
    });
  });
});
