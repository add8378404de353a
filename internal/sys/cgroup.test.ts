// placeWithCpuWeight's writes, on a directory laid out as a cgroup v2
// hierarchy's root (this host's unified hierarchy offers no controllers, and
// moving a process into a real cgroup is what the node does on a VM: the
// kernel's side is checked there, in the cluster e2e's logs step).

import { describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { CgroupPlacementError, ETCD_CGROUP, ETCD_CPU_WEIGHT, placeWithCpuWeight } from "./mod.ts";

function fakeRoot(path: string, controllers: string, enabled = ""): string {
  mkdirSync(path, { recursive: true });
  writeFileSync(join(path, "cgroup.controllers"), `${controllers}\n`);
  writeFileSync(join(path, "cgroup.subtree_control"), enabled);
  return path;
}

describe("a process placed with a CPU weight", () => {
  test("the root's children get the cpu controller, the cgroup its weight, and the pid moves in", () => {
    using dir = tempDir("nodecore-cgroup-");
    const root = fakeRoot(dir.path, "cpuset cpu io memory pids");
    placeWithCpuWeight(root, ETCD_CGROUP, 4242, ETCD_CPU_WEIGHT);
    expect(readFileSync(join(root, "cgroup.subtree_control"), "utf8")).toBe("+cpu");
    expect(readFileSync(join(root, ETCD_CGROUP, "cpu.weight"), "utf8")).toBe(`${ETCD_CPU_WEIGHT}\n`);
    expect(readFileSync(join(root, ETCD_CGROUP, "cgroup.procs"), "utf8")).toBe("4242\n");
  });

  test("a root whose children have the cpu controller already is left as it is", () => {
    using dir = tempDir("nodecore-cgroup-");
    const root = fakeRoot(dir.path, "cpu io memory", "cpu io memory");
    placeWithCpuWeight(root, "nodecore-x", 7, 50);
    expect(readFileSync(join(root, "cgroup.subtree_control"), "utf8")).toBe("cpu io memory");
    expect(readFileSync(join(root, "nodecore-x", "cpu.weight"), "utf8")).toBe("50\n");
  });

  test("no cpu controller, a bad name or weight, or a failed write: one error naming it, nothing written", () => {
    using dir = tempDir("nodecore-cgroup-");
    const bare = fakeRoot(join(dir.path, "bare"), "memory pids");
    expect(() => placeWithCpuWeight(bare, ETCD_CGROUP, 1, 100)).toThrow(new CgroupPlacementError(`the cgroup hierarchy at ${bare} offers no cpu controller`));
    expect(readFileSync(join(bare, "cgroup.subtree_control"), "utf8")).toBe("");
    const root = fakeRoot(join(dir.path, "root"), "cpu");
    expect(() => placeWithCpuWeight(root, "../escape", 1, 100)).toThrow('invalid cgroup name "../escape"');
    expect(() => placeWithCpuWeight(root, "ok", 1, 0)).toThrow("cpu.weight 0 is not an integer from 1 to 10000");
    expect(() => placeWithCpuWeight(root, "ok", 1, 10_001)).toThrow("cpu.weight 10001 is not an integer from 1 to 10000");
    expect(() => placeWithCpuWeight(join(dir.path, "absent"), "ok", 1, 100)).toThrow(`reading ${join(dir.path, "absent", "cgroup.controllers")}: ENOENT`);
  });
});
