// Add-on manifests (manifests.ts): what is accepted, the order objects are
// applied in, one manifest's apply stopping at its first refusal, and what a
// refusal may say. The real apiserver applies them in
// test/kubernetes_controller_process.test.ts.

import { describe, expect, test } from "bun:test";
import { applyManifest, applyOrder, manifestNameProblem, manifestsStatusObject, parseManifestObjects, parseManifestsStatus, refusalText, type ManifestObject } from "./manifests.ts";

const cm = (name: string, namespace?: string): ManifestObject => ({ apiVersion: "v1", kind: "ConfigMap", metadata: { name, ...(namespace ? { namespace } : {}) } });

describe("add-on manifests", () => {
  test("names are DNS labels; objects need an apiVersion, a kind and a name, once each", () => {
    expect(manifestNameProblem("web-1")).toBeUndefined();
    for (const bad of ["", "Web", "-web", "a".repeat(64), "web.app"]) expect(manifestNameProblem(bad)).toMatch(/is not a manifest name/);
    expect(parseManifestObjects(JSON.stringify([cm("a"), { apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "d", namespace: "web" } }]))).toHaveLength(2);
    // The same name under two kinds, or in two namespaces, is two objects.
    expect(parseManifestObjects(JSON.stringify([cm("a"), cm("a", "other"), { apiVersion: "v1", kind: "Secret", metadata: { name: "a" } }]))).toHaveLength(3);
    expect(parseManifestObjects(JSON.stringify([cm("a"), cm("a")]))).toBe("object 2 (ConfigMap a) is named twice");
    expect(parseManifestObjects(JSON.stringify([{ apiVersion: "v1", kind: "pod", metadata: { name: "p" } }]))).toBe('object 1: kind "pod" is not a kind');
    expect(parseManifestObjects(JSON.stringify([{ apiVersion: "v1", kind: "Pod", metadata: { name: "p", namespace: "Bad_NS" } }]))).toMatch(/metadata\.namespace "Bad_NS" is not a namespace/);
    expect(parseManifestObjects(JSON.stringify(["text"]))).toBe("object 1 is not an object");
    expect(parseManifestObjects(JSON.stringify({ kind: "Pod" }))).toBe("its objects are not a JSON array");
    expect(parseManifestObjects(JSON.stringify(Array.from({ length: 201 }, (_, i) => cm(`c${i}`))))).toMatch(/^it holds 201 objects, more than the 200/);
  });

  test("namespaces, definitions, accounts and roles go first; the rest keep the manifest's order", () => {
    const objects: ManifestObject[] = [
      { apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "d", namespace: "web" } },
      { apiVersion: "v1", kind: "Service", metadata: { name: "s", namespace: "web" } },
      { apiVersion: "rbac.authorization.k8s.io/v1", kind: "RoleBinding", metadata: { name: "rb", namespace: "web" } },
      { apiVersion: "v1", kind: "Namespace", metadata: { name: "web" } },
      { apiVersion: "apiextensions.k8s.io/v1", kind: "CustomResourceDefinition", metadata: { name: "x.example.com" } },
    ];
    expect(applyOrder(objects).map((o) => o.kind)).toEqual(["Namespace", "CustomResourceDefinition", "RoleBinding", "Deployment", "Service"]);
  });

  test("one manifest stops at its first refusal, says which object and why, and never quotes a Secret's refusal", async () => {
    const patched: string[] = [];
    const api = {
      patch: async (o: ManifestObject, _p?: string, _d?: string, manager?: string, force?: boolean, strategy?: string) => {
        expect([manager, force, strategy]).toEqual(["nodecore-manifests", true, "application/apply-patch+yaml"]);
        if (o.metadata.name === "refused")
          throw Object.assign(new Error("HTTP-Code: 422"), { code: 422, body: JSON.stringify({ message: `ConfigMap "refused" is invalid: data: value "s3cr3t" too long`, reason: "Invalid" }) });
        patched.push(o.metadata.name);
        return o;
      },
    };
    const objects = [cm("first"), cm("refused"), cm("never")];
    const outcome = await applyManifest(api, { name: "app", objectsJson: JSON.stringify(objects) }, "application/apply-patch+yaml");
    expect(patched).toEqual(["first"]);
    expect(outcome).toMatchObject({ name: "app", applied: 1, objects: 3, error: 'ConfigMap refused: ConfigMap "refused" is invalid: data: value "s3cr3t" too long' });
    const secret: ManifestObject = { apiVersion: "v1", kind: "Secret", metadata: { name: "db", namespace: "web" } };
    const said = refusalText(Object.assign(new Error("x"), { code: 422, body: JSON.stringify({ message: 'Secret "db" is invalid: data[pw]: "s3cr3t"', reason: "Invalid" }) }), secret);
    expect(said).toBe("Secret web/db: HTTP 422 Invalid");
    expect(refusalText(new Error("x".repeat(1000)), cm("c")).length).toBe(300);
  });

  test("the status keeps each manifest's digest and outcome, and reads back", () => {
    const object = manifestsStatusObject(
      [
        { name: "app", sha256: "a1", applied: 1, objects: 3, error: "ConfigMap refused: no" },
        { name: "ok", sha256: "b2", applied: 2, objects: 2 },
      ],
      "node-a",
      5,
    );
    expect(object.metadata).toMatchObject({ name: "nodecore-manifests", namespace: "kube-system" });
    const read = parseManifestsStatus({ ...(object.data as Record<string, string>), someone: "else's" });
    expect([...read.keys()]).toEqual(["app", "ok"]);
    expect(read.get("app")).toEqual({ sha256: "a1", applied: 1, objects: 3, error: "ConfigMap refused: no", node: "node-a", atMs: 5 });
  });
});
