// The owner's side of updates: a bundle directory is checked here before a
// byte leaves, and a cluster update goes Kubernetes controllers first, then
// the other consensus members one at a time, only while the others are
// healthy, then the rest (its rollout: cluster_update.test.ts).

import { describe, expect, test } from "bun:test";
import { truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { BUNDLE_FILES, NODE_ARCH, type BundleManifest } from "../update/mod.ts";
import type { NodeSummary } from "./format.ts";
import { planClusterUpdate, readBundle } from "./mod.ts";
import { describeSending, parseSendFiles, type WantedFile } from "./update.ts";
import { describeDryRun, preflight, refusal } from "./cluster_update.ts";
import type { OwnerKubernetes } from "./kubernetes_api.ts";
import type { Bundle } from "./update.ts";

function bundleDir() {
  const dir = tempDir("nodecore-bundle-");
  const files = {} as Record<string, { bytes: number; sha256: string }>;
  for (const name of BUNDLE_FILES) {
    const bytes = Buffer.from(name === "version" ? "0.2.0\n" : `${name} `.repeat(100));
    writeFileSync(join(dir.path, name), bytes);
    files[name] = { bytes: bytes.length, sha256: new Bun.CryptoHasher("sha256").update(bytes).digest("hex") };
  }
  writeFileSync(join(dir.path, "bundle.json"), JSON.stringify({ format: 1, version: "0.2.0", arch: NODE_ARCH, files }));
  return dir;
}

describe("a bundle directory", () => {
  test("is read when every file matches its description", async () => {
    using dir = bundleDir();
    expect((await readBundle(dir.path)).manifest.version).toBe("0.2.0");
  });

  test("without bundle.json is not a bundle", async () => {
    using dir = tempDir("nodecore-bundle-");
    await expect(readBundle(dir.path)).rejects.toThrow(`${dir.path} is not an update bundle: it has no bundle.json (bun run image writes one to out/image/slot/)`);
  });

  test("with a truncated file is refused, naming it", async () => {
    using dir = bundleDir();
    truncateSync(join(dir.path, "initramfs"), 10);
    await expect(readBundle(dir.path)).rejects.toThrow("the bundle's initramfs is 10 bytes; bundle.json says 1000: it is truncated or was changed");
  });

  test("with a changed file is refused, naming it", async () => {
    using dir = bundleDir();
    writeFileSync(join(dir.path, "kernel"), "KERNEL ".repeat(100).slice(0, 700));
    await expect(readBundle(dir.path)).rejects.toThrow("the bundle's kernel does not match the sha256 in bundle.json: it was changed or damaged");
  });
});

function node(id: string, roles: string[], extra: Partial<NodeSummary> = {}): NodeSummary {
  return { id, state: "UP", address: "10.0.0.1", roles, curator: false, labels: [], health: "HEALTHY", version: "0.1.0", services: [], ...extra };
}

describe("the files a node asks for", () => {
  const manifest = {
    format: 1,
    version: "0.2.0",
    arch: "x86_64",
    files: {
      system: { bytes: 4096, sha256: "a".repeat(64) },
      kernel: { bytes: 700, sha256: "b".repeat(64) },
      initramfs: { bytes: 3_000_000, sha256: "c".repeat(64) },
      version: { bytes: 6, sha256: "d".repeat(64) },
      cmdline: { bytes: 80, sha256: "e".repeat(64) },
    },
  } satisfies BundleManifest;
  const whole = (names: string[]) => names.map((name) => ({ name, from: 0 }) as WantedFile);

  test("are sent in the bundle's order when each is the bundle's, once", () => {
    expect(parseSendFiles(["initramfs", "version", "cmdline"], manifest)).toEqual(whole(["initramfs", "version", "cmdline"]));
    expect(parseSendFiles([], manifest)).toEqual([]);
    expect(parseSendFiles([...BUNDLE_FILES], manifest)).toEqual(whole([...BUNDLE_FILES]));
  });

  test("a file whose start the node copied is sent from the offset it names, and ctl says how much it had alike", () => {
    const wanted = parseSendFiles(["initramfs", "version", "cmdline"], manifest, { initramfs: 2_097_152n });
    expect(wanted).toEqual([{ name: "initramfs", from: 2_097_152 }, ...whole(["version", "cmdline"])]);
    expect(describeSending(manifest, wanted as WantedFile[])).toBe(
      "took system, kernel (0.0 MiB) from its booted slot; sending initramfs (0.9 MiB of 2.9 MiB: it had the first 2.0 MiB alike), version, cmdline (0.9 MiB)",
    );
  });

  test.each([
    ["a file no bundle has", ["../../etc/shadow"], {}, 'the node asked for "../../etc/shadow", which no bundle has'],
    ["a file twice", ["kernel", "kernel"], {}, "the node asked for kernel, kernel: not each of the bundle's files once, in its order"],
    ["another order", ["cmdline", "system"], {}, "the node asked for cmdline, system: not each of the bundle's files once, in its order"],
    ["an offset for a file it does not ask for", ["cmdline"], { kernel: 10n }, 'the node asked for "kernel" from an offset, but not for the file'],
    ["an offset past the file's end", ["initramfs"], { initramfs: 3_000_000n }, "the node asked for initramfs from byte 3000000, which is not inside its 3000000 bytes"],
  ])("are refused when they name %s", (_, names, from, why) => {
    expect(parseSendFiles(names as string[], manifest, from as Record<string, bigint>)).toBe(why);
  });
});

describe("a cluster update's plan", () => {
  const nodes = [
    node("n3", ["consensus"]),
    node("n1", ["consensus", "kubernetes-worker"]),
    node("w2", ["kubernetes-worker"]),
    node("w1", []),
    node("n2", ["consensus"], { version: "0.2.0" }),
    node("x", [], { state: "NEW" }),
  ];

  test("takes Kubernetes controllers first, then the other consensus members, then the rest, each in ID order, and skips nodes at the version or not UP", () => {
    const plan = planClusterUpdate(nodes, "0.2.0");
    expect(plan.controllers.map((n) => n.id)).toEqual([]);
    expect(plan.members.map((n) => n.id)).toEqual(["n1", "n3"]);
    expect(plan.workers.map((n) => n.id)).toEqual(["w1", "w2"]);
    expect(plan.skip.map((n) => n.id)).toEqual(["n2"]);
  });

  test.each([
    ["a controller that is also a worker", [node("c", ["consensus", "kubernetes-controller", "kubernetes-worker"]), node("w", ["kubernetes-worker"])], [["c"], [], ["w"]]],
    [
      "two controllers, a plain member and two workers",
      [
        node("w2", ["kubernetes-worker"]),
        node("c2", ["consensus", "kubernetes-controller"]),
        node("m", ["consensus"]),
        node("c1", ["consensus", "kubernetes-controller"]),
        node("w1", ["kubernetes-worker"]),
      ],
      [["c1", "c2"], ["m"], ["w1", "w2"]],
    ],
    ["members that are workers, no controller", [node("m2", ["consensus", "kubernetes-worker"]), node("m1", ["consensus", "kubernetes-worker"])], [[], ["m1", "m2"], []]],
    ["nodes without roles only", [node("b", []), node("a", [])], [[], [], ["a", "b"]]],
    ["a controller already at the version", [node("c", ["consensus", "kubernetes-controller"], { version: "0.2.0" }), node("w", ["kubernetes-worker"])], [[], [], ["w"]]],
  ] as const)("orders %s: controllers, members, the rest", (_, mix, [controllers, members, workers]) => {
    const plan = planClusterUpdate(mix as unknown as NodeSummary[], "0.2.0");
    expect([plan.controllers.map((n) => n.id), plan.members.map((n) => n.id), plan.workers.map((n) => n.id)]).toEqual([[...controllers], [...members], [...workers]]);
  });

  test("does not touch a consensus member while another is not healthy, nor a node that is not healthy itself", () => {
    const sick = [node("n1", ["consensus"]), node("n2", ["consensus"], { health: "HEARTBEAT_TIMEOUT" }), node("w1", [], { health: "DEGRADED", healthReason: "kubelet failing" })];
    expect(refusal(sick[0]!, sick, "0.2.0", false)).toBe("another consensus member is not HEALTHY (n2 HEARTBEAT_TIMEOUT): updating n1 now could cost the cluster its quorum");
    expect(refusal(sick[2]!, sick, "0.2.0", false)).toBe("w1 is DEGRADED (kubelet failing)");
    expect(refusal(sick[0]!, sick, "0.2.0", true)).toBeUndefined();
  });

  test("does not try a version again on a node where it failed, unless forced", () => {
    const failed = node("w1", [], { updateFailure: { version: "0.2.0", reason: "did not rejoin its cluster within 180 s of booting", timeMs: 1 } });
    expect(refusal(failed, [failed], "0.2.0", false)).toBe("w1 failed 0.2.0 before (did not rejoin its cluster within 180 s of booting); pass --force to try it again");
    expect(refusal(failed, [failed], "0.3.0", false)).toBeUndefined();
  });
});

describe("a cluster update's preconditions and its dry run", () => {
  const bundle = (kubernetes?: string) => ({ dir: "/b", text: "{}", manifest: { format: 1, version: "0.2.0", arch: "x86_64", ...(kubernetes ? { kubernetes } : {}), files: {} } }) as unknown as Bundle;
  const cluster = [
    node("c", ["consensus", "kubernetes-controller"], { kubernetesVersion: "v1.37.2" }),
    node("w1", ["kubernetes-worker"], { kubernetesVersion: "v1.37.2" }),
    node("w2", ["kubernetes-worker"], { kubernetesVersion: "v1.37.2" }),
  ];
  /** A stand-in apiserver that lists Nodes (w2's as `w2Ready`) and the pods on w1. */
  const api = (w2Ready: boolean): OwnerKubernetes => ({
    apiservers: ["https://fake"],
    request: async (_method, path) => {
      if (path === "/api/v1/nodes") {
        const item = (name: string, ready: boolean) => ({ metadata: { name }, status: { conditions: [{ type: "Ready", status: ready ? "True" : "False" }] } });
        return { status: 200, body: { items: [item("c", true), item("w1", true), item("w2", w2Ready)] } };
      }
      if (path.startsWith("/api/v1/pods?")) {
        const on = decodeURIComponent(path).endsWith("=w1");
        const pod = (name: string, owner?: string) => ({
          metadata: { name, namespace: "apps", uid: name, ...(owner ? { ownerReferences: [{ kind: owner, name: "o", controller: true }] } : {}) },
          status: { phase: "Running" },
        });
        return { status: 200, body: { items: on ? [pod("web-1", "ReplicaSet"), pod("solo")] : [] } };
      }
      return { status: 404, body: { message: "no" } };
    },
  });

  test("pass with the next minor and every Node Ready; a skew, a Node not Ready and an apiserver that does not answer are each refused, naming why", async () => {
    expect(await preflight(cluster, bundle("v1.38.0"), async () => api(true))).toEqual({ refusals: [], unchecked: [] });
    const refused = await preflight(cluster, bundle("v1.39.0"), async () => api(false));
    expect(refused.refusals).toEqual([
      "the bundle carries Kubernetes v1.39.0, but c runs v1.37.2: that skips 1.38, and the new apiservers would meet v1.37.2's, more than one minor apart; update to a bundle with 1.38 first",
      "w2's Node is not Ready: a drain would move pods onto fewer nodes than the cluster has",
    ]);
    const silent = await preflight(cluster, bundle("v1.37.3"), async () => {
      throw new Error("no apiserver answered GET /api/v1/nodes (https://10.0.0.1:6443: connection refused)");
    });
    expect(silent.refusals).toEqual(["the Kubernetes API did not answer (no apiserver answered GET /api/v1/nodes (https://10.0.0.1:6443: connection refused)): nothing could be drained"]);
    // No Kubernetes roles: nothing of Kubernetes is asked or judged.
    const plain = [node("m", ["consensus"])];
    expect(await preflight(plain, bundle(undefined), async () => Promise.reject(new Error("not asked")))).toEqual({ refusals: [], unchecked: [] });
  });

  test("the dry run reads as the plan: the order, each node's versions, what each drain evicts and leaves", () => {
    const text = describeDryRun({
      version: "0.2.0",
      kubernetes: "v1.38.0",
      order: [
        { node: "c", name: "c", group: "controller", from: "0.1.0", kubernetesFrom: "v1.37.2" },
        { node: "w1", name: "w1 (node2)", group: "other", from: "0.1.0", kubernetesFrom: "v1.37.2", evict: ["apps/web-1"], stay: ["apps/solo"] },
      ],
      skipped: ["w2"],
      preflight: { refusals: [], unchecked: ["w3 does not say which Kubernetes it runs: not checked against it"] },
    });
    expect(text.split("\n")).toEqual([
      "to 0.2.0 (Kubernetes v1.38.0), in this order:",
      "  1. c (Kubernetes controller): 0.1.0 → 0.2.0, Kubernetes v1.37.2 → v1.38.0; not drained",
      "  2. w1 (node2) (other): 0.1.0 → 0.2.0, Kubernetes v1.37.2 → v1.38.0; drained: evicts apps/web-1; stay: apps/solo",
      "already at 0.2.0: w2",
      "not checked: w3 does not say which Kubernetes it runs: not checked against it",
      "nothing was changed (--dry-run)",
    ]);
  });
});
