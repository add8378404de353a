// The system image: what of the system tree goes in, and the user's own
// Kubernetes binaries (bun run image --kubernetes DIR): what is accepted,
// what is refused and why, and that they land where nodes look for them.

import { afterAll, describe, expect, test } from "bun:test";
import { chmodSync, copyFileSync, mkdirSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../internal/testing/mod.ts";
import { ImageBuildError } from "./errors.ts";
import { KUBERNETES_BINARIES, buildSystemImage, kubernetesBinaries, systemContents } from "./system.ts";

const dir = tempDir("nodecore-system-");
afterAll(() => dir[Symbol.dispose]());

/** A directory of "Kubernetes binaries": copies of an ELF executable (real ones are in neither npm nor Debian). */
function elfBinaries(name: string, which: readonly string[] = KUBERNETES_BINARIES): string {
  const path = join(dir.path, name);
  mkdirSync(path, { recursive: true });
  for (const binary of which) {
    copyFileSync("/bin/true", join(path, binary));
    chmodSync(join(path, binary), 0o755);
  }
  return path;
}

function refusal(kubernetesDir: string): string {
  try {
    kubernetesBinaries(kubernetesDir);
  } catch (error) {
    expect(error).toBeInstanceOf(ImageBuildError);
    return (error as Error).message;
  }
  throw new Error("accepted");
}

describe("Kubernetes binaries in the system image", () => {
  test("a missing binary and a non-ELF file are named", () => {
    const partial = elfBinaries("partial", ["kube-apiserver", "kube-controller-manager", "kube-scheduler"]);
    expect(refusal(partial)).toContain("kubelet is missing");
    const script = elfBinaries("script");
    Bun.write(join(script, "kube-scheduler"), "#!/bin/sh\nexit 0\n");
    expect(refusal(script)).toContain("kube-scheduler is not an ELF executable");
  });

  test("the system tree goes in less etcd and etcdctl, multicall links as links; --kubernetes DIR takes /kubernetes/bin's place", async () => {
    // A small tree shaped like out/system: links into a cache, and a multicall link.
    const cache = elfBinaries("cache", ["etcd", "etcdctl", "containerd", "runc", "hyperkube"]);
    const tree = join(dir.path, "tree");
    const put = (path: string, target: string) => {
      mkdirSync(join(tree, path, ".."), { recursive: true });
      symlinkSync(target, join(tree, path));
    };
    put("usr/bin/etcd", join(cache, "etcd"));
    put("usr/bin/etcdctl", join(cache, "etcdctl"));
    put("usr/bin/containerd", join(cache, "containerd"));
    put("usr/sbin/runc", join(cache, "runc"));
    put("kubernetes/bin/hyperkube", join(cache, "hyperkube"));
    put("kubernetes/bin/kubelet", "hyperkube");
    const built = systemContents(tree);
    expect(built.files.map((f) => [f.path, typeof f.contents === "string" ? "copy" : "link", f.mode])).toEqual([
      ["/kubernetes/bin/hyperkube", "copy", 0o755],
      ["/kubernetes/bin/kubelet", "link", 0o777],
      ["/usr/bin/containerd", "copy", 0o755],
      ["/usr/sbin/runc", "copy", 0o755],
    ]);
    expect(built.sources).toEqual([join(cache, "containerd"), join(cache, "hyperkube"), join(cache, "runc")]);

    const good = elfBinaries("good");
    const theirs = systemContents(tree, good);
    expect(theirs.files.filter((f) => f.path.startsWith("/kubernetes/bin/")).map((f) => [f.path, f.mode])).toEqual(KUBERNETES_BINARIES.map((b) => [`/kubernetes/bin/${b}`, 0o755]));
    expect(() => systemContents(join(dir.path, "nothing"))).toThrow(/no system tree at .*nothing: build it first \(bun run build\)/);

    const image = join(dir.path, "system.squashfs");
    await buildSystemImage(built, join(dir.path, "stage"), image);
    const listing = Bun.spawnSync(["unsquashfs", "-lls", image]).stdout.toString();
    expect(listing).toMatch(/-rwxr-xr-x root\/root .* squashfs-root\/kubernetes\/bin\/hyperkube\n/);
    expect(listing).toMatch(/lrwxrwxrwx root\/root .* squashfs-root\/kubernetes\/bin\/kubelet -> hyperkube\n/);
    expect(listing).not.toContain("etcd");
  }, 60_000);
});
