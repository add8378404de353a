// Package upstream: etcd, containerd, runc, the CNI plugins and Kubernetes,
// built here from their Go modules, never from copied source and never
// downloaded as binaries.
//
//   versions.ts ──pin.ts──▶ <component>/go.mod, go.sum     (committed; pin.ts
//       │                    reads Kubernetes' staging list from its own go.mod)
//       ▼
//   components.ts: packages, tags, version stamps per component
//       │
//       ▼ build.ts: go build -trimpath, CGO_ENABLED=0 (runc: cgo, static,
//       │           seccomp), GOTOOLCHAIN=local, -mod=readonly
//   ~/.cache/nodecore/upstream/<name>-<version>-<fingerprint>/   (complete once BUILT exists)
//       │
//       ▼ stageSystemTree: symlinks, laid out as the node sees them
//   out/system/usr/bin/{etcd,etcdctl,etcdutl,containerd,containerd-shim-runc-v2,ctr,coredns}
//              usr/sbin/runc   usr/lib/cni/{bridge,host-local,loopback}
//              kubernetes/bin/{hyperkube, kube-apiserver, ..., kubelet, kubectl -> hyperkube}
//              + what build.ts adds: the container images (pause, busybox)
//                and busybox's mount/umount for the kubelet
//       │
//       ├──▶ node processes (`init --system out/system`): run from there
//       └──▶ the image (image/mod.ts): etcd into the initramfs, the rest into
//            the system image, at the same paths below /system
//
// TEST_COMPONENTS are built the same way, but only when a test asks for
// them (buildComponent), and never go into the tree: the Kubernetes
// conformance suite (e2e.test, `go test -c` of k8s.io/kubernetes/test/e2e,
// and agnhost) for `bun run conformance` (test/conformance/cli.ts).
//
// Invariants:
//  - One wrapper module per upstream: their dependency graphs never raise
//    each other's versions.
//  - A cached folder is used only when complete (its BUILT file is written
//    last, then the folder renamed into place); a build that fails stops with
//    one line naming the component, its version and the step.
//  - The same versions and wrapper files give the same folder name, so a
//    second set-up builds nothing.

import { existsSync, lstatSync, mkdirSync, readlinkSync, renameSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { COMPONENTS } from "./components.ts";

export { buildUpstream, buildComponent, upstreamCacheDir, UpstreamBuildError, type BuildReport } from "./build.ts";
export { ALL_COMPONENTS, COMPONENTS, TEST_COMPONENTS, component, type Component } from "./components.ts";
export * from "./versions.ts";

/** Where each component's files go in the system tree (and below /system in the guest). */
export const SYSTEM_TREE_DIRS: Record<string, string> = {
  etcd: "usr/bin",
  containerd: "usr/bin",
  runc: "usr/sbin",
  cni: "usr/lib/cni",
  kubernetes: "kubernetes/bin",
  coredns: "usr/bin",
  "metrics-server": "kubernetes/bin",
  // Beside coredns, not in kubernetes/bin: an image built with the user's Kubernetes binaries (--kubernetes) keeps it.
  "kube-network-policies": "usr/bin",
};

/** The tree's files that the initramfs carries instead of the system image (consensus needs them before any role). */
export const INITRAMFS_FILES = ["usr/bin/etcd"] as const;

export interface SystemTreeEntry {
  /** Relative path in the tree. */
  path: string;
  /** The built file (for a multicall link: the file it names). */
  source: string;
  /** For a multicall name: the file name it links to, in the same folder. */
  link?: string;
}

/** The tree's entries, from the components' built folders (name -> folder). */
export function systemTreeEntries(dirs: Record<string, string>): SystemTreeEntry[] {
  const entries: SystemTreeEntry[] = [];
  for (const c of COMPONENTS) {
    const dir = dirs[c.name];
    if (!dir) throw new Error(`no build of ${c.name}`);
    const into = SYSTEM_TREE_DIRS[c.name]!;
    for (const binary of c.binaries) entries.push({ path: join(into, binary.name), source: join(dir, binary.name) });
    for (const [link, target] of Object.entries(c.links)) entries.push({ path: join(into, link), source: join(dir, target), link: target });
  }
  return entries.sort((a, b) => a.path.localeCompare(b.path));
}

/** A file of the tree that is not an upstream binary. */
export interface ExtraFile {
  path: string;
  /** Bytes, or a link target. */
  contents: Uint8Array | { link: string };
  mode: number;
}

/**
 * Lays the built components out in `dest` as symlinks into the cache, with
 * the extra files, replacing what was there (the new tree is made beside
 * it, then renamed).
 */
export function stageSystemTree(dirs: Record<string, string>, dest: string, extra: readonly ExtraFile[] = []): void {
  const next = `${dest}.next`;
  rmSync(next, { recursive: true, force: true });
  for (const entry of systemTreeEntries(dirs)) {
    const path = join(next, entry.path);
    mkdirSync(dirname(path), { recursive: true });
    symlinkSync(entry.link ?? entry.source, path);
  }
  for (const file of extra) {
    const path = join(next, file.path);
    mkdirSync(dirname(path), { recursive: true });
    if (file.contents instanceof Uint8Array) writeFileSync(path, file.contents, { mode: file.mode });
    else symlinkSync(file.contents.link, path);
  }
  rmSync(dest, { recursive: true, force: true });
  renameSync(next, dest);
}

/** Whether `dest` is a staged tree whose links all resolve. */
export function systemTreeReady(dest: string): boolean {
  const probe = ["usr/bin/etcd", "usr/bin/containerd", "usr/sbin/runc", "kubernetes/bin/hyperkube"];
  return probe.every((p) => {
    const path = join(dest, p);
    try {
      return lstatSync(path).isSymbolicLink() && existsSync(path) && readlinkSync(path) !== "";
    } catch {
      return false;
    }
  });
}
