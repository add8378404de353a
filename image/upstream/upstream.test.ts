// The upstream build: the staging list read from Kubernetes' own go.mod,
// the wrappers' go.mod files matching versions.ts, the cache's rule that
// only a complete build is used, and the one-line error of a build that
// cannot fetch its modules.

import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../../internal/testing/mod.ts";
import { buildComponent, componentDir, isComplete, loggedStep, UpstreamBuildError } from "./build.ts";
import { ALL_COMPONENTS, COMPONENTS, type Component } from "./components.ts";
import { UPSTREAM_DIR } from "./go.ts";
import { parseStagingModules, skeletonGoMod } from "./pin.ts";
import { KUBERNETES_VERSION } from "./versions.ts";

const dir = tempDir("nodecore-upstream-");
afterAll(() => dir[Symbol.dispose]());

describe("pinning", () => {
  test("the staging modules are the k8s.io requirements at exactly v0.0.0, from the go.mod text", () => {
    const goMod = [
      "module k8s.io/kubernetes",
      "require (",
      "\tk8s.io/api v0.0.0",
      "\tk8s.io/utils v0.0.0-20251002143259-bc988d571ff4",
      "\tk8s.io/kube-openapi v0.0.0-20250910181357-589584f1c912 // indirect",
      "\tk8s.io/streaming v0.0.0 // indirect",
      "\tgithub.com/x/y v0.0.0",
      ")",
      "require k8s.io/apiserver v0.0.0",
      "replace k8s.io/api => ./staging/src/k8s.io/api",
    ].join("\n");
    expect(parseStagingModules(goMod)).toEqual(["k8s.io/api", "k8s.io/apiserver", "k8s.io/streaming"]);
  });

  test("every committed wrapper requires what versions.ts names, and Kubernetes replaces every staging module with v0.<minor>.<patch>", () => {
    for (const c of ALL_COMPONENTS) {
      const goMod = readFileSync(join(UPSTREAM_DIR, c.name, "go.mod"), "utf8");
      for (const [module, version] of Object.entries(c.requires)) expect(goMod).toMatch(new RegExp(`\\n\\t${module.replaceAll(".", "\\.")} ${version.replaceAll(".", "\\.")}( // indirect)?\\n`));
      expect(goMod).toContain("go 1.26.8");
      expect(existsSync(join(UPSTREAM_DIR, c.name, "go.sum"))).toBe(true);
    }
    const staging = KUBERNETES_VERSION.replace(/^v1\./, "v0.");
    const kubernetesWrappers = ALL_COMPONENTS.filter((c) => c.module === "k8s.io/kubernetes");
    expect(kubernetesWrappers.map((c) => c.name)).toEqual(["kubernetes", "conformance"]);
    for (const c of kubernetesWrappers) {
      const goMod = readFileSync(join(UPSTREAM_DIR, c.name, "go.mod"), "utf8");
      const replaces = [...goMod.matchAll(/^\t(k8s\.io\/\S+) => (\S+) (\S+)$/gm)];
      expect(replaces.length).toBeGreaterThanOrEqual(30);
      for (const [, from, to, version] of replaces) {
        expect(to).toBe(from);
        expect(version).toBe(staging);
      }
    }
  });

  test("the skeleton go.mod lists requires, tools and replaces", () => {
    const c = COMPONENTS.find((x) => x.name === "cni")!;
    const text = skeletonGoMod(c, { "example.org/a": "v1.2.3" });
    expect(text).toContain("module nodecore.invalid/upstream/cni\n");
    expect(text).toContain(`require (\n\tgithub.com/containernetworking/plugins ${c.version}\n)`);
    expect(text).toContain("tool (\n\tgithub.com/containernetworking/plugins/plugins/main/bridge\n");
    expect(text).toContain("replace (\n\texample.org/a => example.org/a v1.2.3\n)");
  });
});

describe("the cache", () => {
  test("a folder counts only with its BUILT file and every binary and link in it", async () => {
    const c = COMPONENTS.find((x) => x.name === "kubernetes")!;
    const folder = join(dir.path, "k");
    mkdirSync(folder);
    writeFileSync(join(folder, "hyperkube"), "x");
    expect(isComplete(folder, c)).toBe(false);
    writeFileSync(join(folder, "BUILT"), "k8s.io/kubernetes\n");
    // The links are missing still.
    expect(isComplete(folder, c)).toBe(false);
    for (const link of Object.keys(c.links)) writeFileSync(join(folder, link), "x");
    expect(isComplete(folder, c)).toBe(true);
  });

  test("the folder's name changes with the component's flags", async () => {
    const c = COMPONENTS.find((x) => x.name === "etcd")!;
    const changed: Component = { ...c, tags: ["another"] };
    const [a, b] = [await componentDir(c), await componentDir(changed)];
    expect(a).toContain(`/etcd-${c.version}-`);
    expect(a).not.toBe(b);
  });
});

describe("progress", () => {
  test("a step says when it starts, that it is still at it while it runs, and how long it took", async () => {
    const lines: string[] = [];
    const result = await loggedStep(
      "kubernetes: building hyperkube (1 of 1)",
      (l) => lines.push(l),
      () => Bun.sleep(130).then(() => 42),
      40,
    );
    expect(result).toBe(42);
    expect(lines[0]).toBe("kubernetes: building hyperkube (1 of 1) …");
    expect(lines.filter((l) => /still at it after \d+ s$/.test(l)).length).toBeGreaterThanOrEqual(2);
    expect(lines.at(-1)).toMatch(/^kubernetes: building hyperkube \(1 of 1\): done in \d+ s$/);
  });

  test("a failed step stops its heartbeat", async () => {
    const lines: string[] = [];
    await expect(
      loggedStep(
        "x",
        (l) => lines.push(l),
        () => Bun.sleep(10).then(() => Promise.reject(new Error("no"))),
        20,
      ),
    ).rejects.toThrow("no");
    const count = lines.length;
    await Bun.sleep(80);
    expect(lines.length).toBe(count);
  });
});

describe("a build that cannot be done", () => {
  test("stops with one line naming the component, its version and the step, and leaves no folder that counts", async () => {
    // A wrapper whose go.mod pins a version the proxy has never served.
    const name = "bogus";
    const wrapper = join(UPSTREAM_DIR, name);
    mkdirSync(wrapper, { recursive: true });
    const bogus: Component = {
      name,
      module: "github.com/containernetworking/plugins",
      version: "v0.0.0-nodecore-never",
      requires: { "github.com/containernetworking/plugins": "v0.0.0-nodecore-never" },
      tools: [],
      binaries: [{ name: "bridge", pkg: "github.com/containernetworking/plugins/plugins/main/bridge" }],
      links: {},
      cgo: false,
      tags: [],
      stamps: {},
      staticLink: false,
    };
    try {
      writeFileSync(join(wrapper, "go.mod"), skeletonGoMod(bogus, {}));
      writeFileSync(join(wrapper, "go.sum"), "");
      process.env.NODECORE_UPSTREAM_CACHE = join(dir.path, "cache");
      const lines: string[] = [];
      const error = await buildComponent(bogus, (line) => lines.push(line)).then(
        () => undefined,
        (e: unknown) => e,
      );
      expect(error).toBeInstanceOf(UpstreamBuildError);
      const message = (error as Error).message;
      expect(message.split("\n")).toHaveLength(1);
      expect(message).toStartWith("bogus v0.0.0-nodecore-never: fetching modules failed: ");
      expect(message).toContain("github.com/containernetworking/plugins");
      expect(isComplete(await componentDir(bogus), bogus)).toBe(false);
      // It said what it was doing, and never that the step was done.
      expect(lines[0]).toBe("bogus: fetching modules …");
      expect(lines.some((l) => l.includes("done"))).toBe(false);
    } finally {
      delete process.env.NODECORE_UPSTREAM_CACHE;
      Bun.spawnSync(["rm", "-rf", wrapper]);
    }
  }, 120_000);
});
