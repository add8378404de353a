// The system image: a read-only squashfs beside the initramfs, for what
// only some roles need. A node mounts it when such a role first needs it
// (internal/localstorage/system_image.ts); the launcher attaches it to every
// VM as a read-only drive, shared, not copied. Keeping these files out of the
// initramfs keeps every node's boot from unpacking them: with the runtime in
// the initramfs it grew from 72.5 to 109.2 MiB (lz4), and every boot under
// TCG unpacks all of it.
//
// Its contents are the system tree that `bun run build` lays out in
// out/system (image/upstream/mod.ts), less what the initramfs carries (etcd)
// and what no node runs (etcdctl):
//
//   /usr/bin/{containerd,containerd-shim-runc-v2,ctr}, /usr/sbin/runc
//                              the container runtime (worker role), static
//   /usr/lib/cni/{bridge,host-local,loopback}   the pods' network
//   /kubernetes/bin/hyperkube + kube-apiserver, kube-controller-manager,
//                              kube-scheduler, kube-proxy, kubelet, kubectl
//                              (symlinks: one multicall binary)
//   /usr/libexec/nodecore/{busybox,mount,umount}   the kubelet's mount tools
//   /usr/share/nodecore/images/{runtime-probe,pause}.oci.tar
//                              busybox (the probe and test image) and the
//                              sandbox image, imported into containerd
//   /usr/share/nodecore/ca-certificates.crt
//                              the public CAs (Debian's ca-certificates):
//                              containerd verifies public registries with them
//
// With `bun run image --kubernetes DIR` the user's own Kubernetes binaries
// take /kubernetes/bin's place: checked to be ELF executables, never the
// test stand-in. zstd-compressed; built reproducibly (every file owned by
// root, every time 0), so the same inputs give the same bytes.

import {
  chmodSync,
  closeSync,
  copyFileSync,
  lstatSync,
  mkdirSync,
  openSync,
  readdirSync,
  readlinkSync,
  readSync,
  realpathSync,
  renameSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { dirname, isAbsolute, join, relative } from "node:path";
import { CONTROLLER_COMPONENTS } from "../internal/kubernetes/mod.ts";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import { INITRAMFS_FILES, systemTreeReady } from "./upstream/mod.ts";

/** Tree files no node runs. */
const LEFT_OUT = ["usr/bin/etcdctl"];

const MKSQUASHFS_ARGS = ["-noappend", "-comp", "zstd", "-all-root", "-mkfs-time", "0", "-all-time", "0", "-no-xattrs", "-quiet"] as const;

export interface SystemFile {
  /** Path inside the image. */
  path: string;
  /** A host file to copy, the bytes, or a symlink's target. */
  contents: string | Uint8Array | { link: string };
  mode: number;
}

export interface SystemContents {
  files: SystemFile[];
  /** Host files copied: what the image's fingerprint hashes. */
  sources: string[];
}

/** The Kubernetes binaries a system image built with --kubernetes holds, and where. */
export const KUBERNETES_BINARIES = [...CONTROLLER_COMPONENTS, "kubelet", "kube-proxy"] as const;
export const KUBERNETES_IMAGE_DIR = "/kubernetes/bin";

/** The first bytes of a file. */
function head(path: string, bytes: number): Buffer {
  const fd = openSync(path, "r");
  try {
    const buffer = Buffer.alloc(bytes);
    return buffer.subarray(0, readSync(fd, buffer, 0, bytes, 0));
  } finally {
    closeSync(fd);
  }
}

/**
 * The user's Kubernetes binaries in `dir`, checked: all four present,
 * executable ELF files. A script is refused: it could not run in the
 * image.
 */
export function kubernetesBinaries(dir: string): string[] {
  const problems: string[] = [];
  const found: string[] = [];
  for (const name of KUBERNETES_BINARIES) {
    const path = join(dir, name);
    let mode: number;
    try {
      const stat = statSync(path);
      if (!stat.isFile()) {
        problems.push(`${name} is not a file`);
        continue;
      }
      mode = stat.mode;
    } catch {
      problems.push(`${name} is missing`);
      continue;
    }
    const start = head(path, 4096);
    if (!start.subarray(0, 4).equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) problems.push(`${name} is not an ELF executable`);
    else if ((mode & 0o111) === 0) problems.push(`${name} is not executable`);
    else found.push(path);
  }
  if (problems.length) throw new ImageBuildError(`--kubernetes ${dir}: ${problems.join("; ")} (needed: ${KUBERNETES_BINARIES.join(", ")})`);
  return found;
}

/** What the system image holds: the system tree at `tree`; with `kubernetesDir`, the user's Kubernetes binaries instead of the built ones. */
export function systemContents(tree: string, kubernetesDir?: string): SystemContents {
  if (!systemTreeReady(tree)) throw new ImageBuildError(`no system tree at ${tree}: build it first (bun run build)`);
  const leftOut = new Set<string>([...INITRAMFS_FILES, ...LEFT_OUT]);
  const files: SystemFile[] = [];
  const sources: string[] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir).sort()) {
      const path = join(dir, name);
      const inside = relative(tree, path);
      if (leftOut.has(inside) || (kubernetesDir && inside.startsWith(KUBERNETES_IMAGE_DIR.slice(1) + "/"))) continue;
      const stat = lstatSync(path);
      if (stat.isDirectory()) walk(path);
      else if (stat.isSymbolicLink() && !isAbsolute(readlinkSync(path))) files.push({ path: `/${inside}`, contents: { link: readlinkSync(path) }, mode: 0o777 });
      else {
        // A link into the upstream cache: the built file itself.
        const real = realpathSync(path);
        files.push({ path: `/${inside}`, contents: real, mode: statSync(real).mode & 0o111 ? 0o755 : 0o644 });
        sources.push(real);
      }
    }
  };
  walk(tree);
  if (kubernetesDir) {
    for (const binary of kubernetesBinaries(kubernetesDir)) {
      files.push({ path: join(KUBERNETES_IMAGE_DIR, binary.split("/").at(-1)!), contents: binary, mode: 0o755 });
      sources.push(binary);
    }
  }
  return { files, sources: sources.sort() };
}

/** A stable description of the contents, for the build's fingerprint. */
export function describeSystem(contents: SystemContents): unknown[] {
  return contents.files.map((file) => ({
    path: file.path,
    mode: file.mode,
    contents: typeof file.contents === "string" || !(file.contents instanceof Uint8Array) ? file.contents : new Bun.CryptoHasher("sha256").update(file.contents).digest("hex"),
  }));
}

/** Stages the files in `stageDir` (emptied first) and writes the squashfs to dest (atomically). */
export async function buildSystemImage(contents: SystemContents, stageDir: string, dest: string): Promise<void> {
  rmSync(stageDir, { recursive: true, force: true });
  for (const file of contents.files) {
    const target = join(stageDir, file.path);
    mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
    if (typeof file.contents === "string") copyFileSync(file.contents, target);
    else if (file.contents instanceof Uint8Array) writeFileSync(target, file.contents);
    else {
      symlinkSync(file.contents.link, target);
      continue;
    }
    // copyFileSync keeps the source's mode; the image's is the one listed.
    chmodSync(target, file.mode);
  }
  const partial = `${dest}.partial`;
  rmSync(partial, { force: true });
  await run(["mksquashfs", stageDir, partial, ...MKSQUASHFS_ARGS]);
  renameSync(partial, dest);
  rmSync(stageDir, { recursive: true, force: true });
}
