// The system image: a read-only squashfs beside the initramfs, for what
// only some roles need. A node mounts it when such a role first needs it
// (internal/localstorage/system_image.ts); the launcher attaches it to every
// VM as a read-only drive, shared, not copied. Keeping these files out of the
// initramfs keeps every node's boot from unpacking them: with the runtime in
// the initramfs it grew from 72.5 to 109.2 MiB (lz4), and every boot under
// TCG unpacks all of it.
//
//   /usr/bin/{containerd,containerd-shim-runc-v2,ctr}, /usr/sbin/runc
//                              Debian's container runtime (worker role)
//   /usr/share/nodecore/images/runtime-probe.oci.tar
//                              busybox-static as an OCI image (image/oci.ts)
//   /kubernetes/bin/{kube-apiserver,kube-controller-manager,kube-scheduler,kubelet}
//                              only with `bun run image --kubernetes DIR`: the
//                              user's Kubernetes server binaries (in neither
//                              npm nor Debian), checked to be ELF executables
//                              and never the test stand-in
//
// Their shared libraries (runc's libseccomp) are in the initramfs, where
// the loader looks by default. zstd-compressed; built reproducibly (every file owned by root, every time
// 0), so the same inputs give the same bytes.

import { chmodSync, closeSync, copyFileSync, mkdirSync, openSync, readSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { PROBE_IMAGE_PATH, RUNTIME_BINARIES } from "../internal/containerd/mod.ts";
import { CONTROLLER_COMPONENTS } from "../internal/kubernetes/mod.ts";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import { busyboxImageFrom } from "./oci.ts";

/** Debian's busybox-static: the runtime probe image's one binary. */
export const HOST_BUSYBOX = "/bin/busybox";

const MKSQUASHFS_ARGS = ["-noappend", "-comp", "zstd", "-all-root", "-mkfs-time", "0", "-all-time", "0", "-no-xattrs", "-quiet"] as const;

export interface SystemFile {
  /** Path inside the image. */
  path: string;
  /** A host file to copy, or the bytes. */
  contents: string | Uint8Array;
  mode: number;
}

export interface SystemContents {
  files: SystemFile[];
  /** Host files copied: what the image's fingerprint hashes. */
  sources: string[];
}

/** The Kubernetes binaries a system image built with --kubernetes holds, and where. */
export const KUBERNETES_BINARIES = [...CONTROLLER_COMPONENTS, "kubelet"] as const;
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
 * executable ELF files. A script (the test stand-in's wrappers among them)
 * is refused: it could not run in the image, and must never pass for
 * Kubernetes.
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
    if (start.includes("kube-stub")) problems.push(`${name} is the test stand-in (kube-stub), not a Kubernetes binary`);
    else if (!start.subarray(0, 4).equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) problems.push(`${name} is not an ELF executable`);
    else if ((mode & 0o111) === 0) problems.push(`${name} is not executable`);
    else found.push(path);
  }
  if (problems.length) throw new ImageBuildError(`--kubernetes ${dir}: ${problems.join("; ")} (needed: ${KUBERNETES_BINARIES.join(", ")})`);
  return found;
}

/** What the system image holds; with `kubernetesDir`, the user's Kubernetes binaries too. */
export function systemContents(kubernetesDir?: string): SystemContents {
  const files: SystemFile[] = [];
  const binaries: string[] = Object.values(RUNTIME_BINARIES);
  for (const binary of binaries) files.push({ path: binary, contents: binary, mode: 0o755 });
  files.push({ path: PROBE_IMAGE_PATH, contents: busyboxImageFrom(HOST_BUSYBOX), mode: 0o644 });
  const kubernetes = kubernetesDir ? kubernetesBinaries(kubernetesDir) : [];
  for (const binary of kubernetes) files.push({ path: join(KUBERNETES_IMAGE_DIR, binary.split("/").at(-1)!), contents: binary, mode: 0o755 });
  return { files, sources: [...binaries, ...kubernetes].sort() };
}

/** A stable description of the contents, for the build's fingerprint. */
export function describeSystem(contents: SystemContents): unknown[] {
  return contents.files.map((file) => ({
    path: file.path,
    mode: file.mode,
    contents: typeof file.contents === "string" ? file.contents : new Bun.CryptoHasher("sha256").update(file.contents).digest("hex"),
  }));
}

/** Stages the files in `stageDir` (emptied first) and writes the squashfs to dest (atomically). */
export async function buildSystemImage(contents: SystemContents, stageDir: string, dest: string): Promise<void> {
  rmSync(stageDir, { recursive: true, force: true });
  for (const file of contents.files) {
    const target = join(stageDir, file.path);
    mkdirSync(dirname(target), { recursive: true, mode: 0o755 });
    if (typeof file.contents === "string") copyFileSync(file.contents, target);
    else writeFileSync(target, file.contents);
    // copyFileSync keeps the source's mode; the image's is the one listed.
    chmodSync(target, file.mode);
  }
  const partial = `${dest}.partial`;
  rmSync(partial, { force: true });
  await run(["mksquashfs", stageDir, partial, ...MKSQUASHFS_ARGS]);
  renameSync(partial, dest);
  rmSync(stageDir, { recursive: true, force: true });
}
