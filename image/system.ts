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
//
// Their shared libraries (runc's libseccomp) are in the initramfs, where
// the loader looks by default. zstd-compressed; built reproducibly (every file owned by root, every time
// 0), so the same inputs give the same bytes.

import { chmodSync, copyFileSync, mkdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { PROBE_IMAGE_PATH, RUNTIME_BINARIES } from "../internal/containerd/mod.ts";
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

/** What the system image holds. */
export function systemContents(): SystemContents {
  const files: SystemFile[] = [];
  const binaries = Object.values(RUNTIME_BINARIES);
  for (const binary of binaries) files.push({ path: binary, contents: binary, mode: 0o755 });
  files.push({ path: PROBE_IMAGE_PATH, contents: busyboxImageFrom(HOST_BUSYBOX), mode: 0o644 });
  return { files, sources: [...binaries].sort() };
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
