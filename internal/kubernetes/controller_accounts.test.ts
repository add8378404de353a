import { describe, expect, test } from "bun:test";
import { controllerAccountNames } from "./controller_accounts.ts";

const binding = (name: string, ...subjects: { kind: string; name: string; namespace?: string }[]) => ({ metadata: { name }, subjects });

describe("the controller-manager's accounts, made ahead of it", () => {
  test("are the kube-system service accounts of the bootstrap bindings system:controller:*, sorted, each once", () => {
    const names = controllerAccountNames([
      binding("system:controller:replicaset-controller", { kind: "ServiceAccount", name: "replicaset-controller", namespace: "kube-system" }),
      binding("system:controller:attachdetach-controller", { kind: "ServiceAccount", name: "attachdetach-controller", namespace: "kube-system" }),
      binding("system:controller:again", { kind: "ServiceAccount", name: "replicaset-controller", namespace: "kube-system" }),
    ]);
    expect(names).toEqual(["attachdetach-controller", "replicaset-controller"]);
  });

  test("leave out other bindings, other namespaces, users and groups, and names Kubernetes would refuse", () => {
    const names = controllerAccountNames([
      binding("system:kube-dns", { kind: "ServiceAccount", name: "kube-dns", namespace: "kube-system" }),
      binding("system:controller:x", { kind: "ServiceAccount", name: "elsewhere", namespace: "default" }),
      binding("system:controller:y", { kind: "User", name: "someone" }, { kind: "Group", name: "system:nodes" }),
      binding("system:controller:z", { kind: "ServiceAccount", name: "Not_A_Name", namespace: "kube-system" }, { kind: "ServiceAccount", name: "-dash", namespace: "kube-system" }),
      { metadata: {}, subjects: [{ kind: "ServiceAccount", name: "nameless-binding", namespace: "kube-system" }] },
      { metadata: { name: "system:controller:empty" } },
    ]);
    expect(names).toEqual([]);
  });

  test("are bounded, however many the bindings name", () => {
    const many = Array.from({ length: 1000 }, (_, i) => binding(`system:controller:c${i}`, { kind: "ServiceAccount", name: `c${String(i).padStart(4, "0")}`, namespace: "kube-system" }));
    const names = controllerAccountNames(many);
    expect(names.length).toBe(128);
    expect(names[0]).toBe("c0000");
  });
});
