// Container images made at build time, with no registry: one-layer OCI
// images, written as the "OCI image layout" tarball that `ctr images import`
// reads (oci-layout, index.json, blobs/sha256/<digest>). Two are made:
//  - busybox-static, tagged as the runtime probe (the worker role runs it)
//    and as the test image pods use (imagePullPolicy: Never);
//  - the sandbox ("pause") image of every pod: image/pause.c, static.
//
//   busybox.oci.tar
//   ├── oci-layout                 {"imageLayoutVersion":"1.0.0"}
//   ├── index.json                 → the manifest, tagged with IMAGE_REF
//   └── blobs/sha256/
//       ├── <manifest>             → config + one layer
//       ├── <config>               architecture, os, rootfs.diff_ids, Cmd /bin/sh
//       └── <layer>                uncompressed tar: bin/busybox and bin/sh
//
// Invariants: the bytes depend only on the binaries' bytes (ustar entries
// with mtime 0, owner root, fixed order), so the build stays reproducible.

import { readFileSync } from "node:fs";
import { PROBE_IMAGE_REF, SANDBOX_IMAGE_REF, TEST_IMAGE_REF } from "../internal/containerd/mod.ts";
import { ImageBuildError } from "./errors.ts";

export { PROBE_IMAGE_REF, SANDBOX_IMAGE_REF, TEST_IMAGE_REF };

export type TarEntry = { kind: "dir"; path: string; mode: number } | { kind: "file"; path: string; mode: number; contents: Uint8Array } | { kind: "symlink"; path: string; target: string };

const BLOCK = 512;
const NAME_MAX = 100;

function octal(value: number, width: number): string {
  // width includes the terminating NUL.
  const digits = value.toString(8);
  if (digits.length > width - 1) throw new ImageBuildError(`tar field too large: ${value}`);
  return digits.padStart(width - 1, "0") + "\0";
}

function header(entry: TarEntry): Uint8Array {
  const block = new Uint8Array(BLOCK);
  const put = (offset: number, text: string): void => {
    block.set(new TextEncoder().encode(text), offset);
  };
  const name = entry.kind === "dir" ? `${entry.path.replace(/\/+$/, "")}/` : entry.path;
  if (name.length >= NAME_MAX || name.startsWith("/") || name.split("/").includes("..")) throw new ImageBuildError(`invalid tar path ${JSON.stringify(entry.path)}`);
  put(0, name);
  put(100, octal(entry.kind === "symlink" ? 0o777 : entry.mode, 8));
  put(108, octal(0, 8)); // uid
  put(116, octal(0, 8)); // gid
  put(124, octal(entry.kind === "file" ? entry.contents.length : 0, 12));
  put(136, octal(0, 12)); // mtime
  put(148, "        "); // checksum, counted as spaces
  put(156, entry.kind === "file" ? "0" : entry.kind === "dir" ? "5" : "2");
  if (entry.kind === "symlink") {
    if (entry.target.length >= NAME_MAX) throw new ImageBuildError(`symlink target too long: ${entry.target}`);
    put(157, entry.target);
  }
  put(257, "ustar\0");
  put(263, "00");
  put(265, "root");
  put(297, "root");
  let sum = 0;
  for (const byte of block) sum += byte;
  put(148, octal(sum, 7) + " ");
  return block;
}

/** A ustar archive of the entries, in the order given (no compression). */
export function tarArchive(entries: readonly TarEntry[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const entry of entries) {
    parts.push(header(entry));
    if (entry.kind === "file") {
      parts.push(entry.contents);
      const pad = (BLOCK - (entry.contents.length % BLOCK)) % BLOCK;
      if (pad) parts.push(new Uint8Array(pad));
    }
  }
  parts.push(new Uint8Array(2 * BLOCK)); // end of archive
  return Buffer.concat(parts);
}

function sha256(data: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(data).digest("hex");
}

const json = (value: unknown): Uint8Array => new TextEncoder().encode(JSON.stringify(value));

interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
}

function blob(mediaType: string, data: Uint8Array): { descriptor: Descriptor; data: Uint8Array } {
  return { descriptor: { mediaType, digest: `sha256:${sha256(data)}`, size: data.length }, data };
}

/** The OCI layout tarball of an image of `layers` (bottom first), listed under each of `refs`. */
export function ociImage(refs: readonly string[], layers: readonly (readonly TarEntry[])[], config: Record<string, unknown>): Uint8Array {
  if (layers.length === 0) throw new ImageBuildError("an image needs at least one layer");
  const layerBlobs = layers.map((entries) => blob("application/vnd.oci.image.layer.v1.tar", tarArchive(entries)));
  const configBlob = blob(
    "application/vnd.oci.image.config.v1+json",
    json({ architecture: "amd64", os: "linux", config, rootfs: { type: "layers", diff_ids: layerBlobs.map((l) => l.descriptor.digest) } }),
  );
  const manifest = blob(
    "application/vnd.oci.image.manifest.v1+json",
    json({ schemaVersion: 2, mediaType: "application/vnd.oci.image.manifest.v1+json", config: configBlob.descriptor, layers: layerBlobs.map((l) => l.descriptor) }),
  );
  const index = json({
    schemaVersion: 2,
    mediaType: "application/vnd.oci.image.index.v1+json",
    manifests: refs.map((ref) => ({ ...manifest.descriptor, annotations: { "org.opencontainers.image.ref.name": ref, "io.containerd.image.name": ref } })),
  });
  // Two layers alike are one blob.
  const unique = [...new Map([manifest, configBlob, ...layerBlobs].map((b) => [b.descriptor.digest, b])).values()];
  const blobs = unique.map(({ descriptor, data }) => ({ kind: "file" as const, path: `blobs/sha256/${descriptor.digest.slice("sha256:".length)}`, mode: 0o644, contents: data }));
  return tarArchive([
    { kind: "file", path: "oci-layout", mode: 0o644, contents: json({ imageLayoutVersion: "1.0.0" }) },
    { kind: "file", path: "index.json", mode: 0o644, contents: index },
    { kind: "dir", path: "blobs", mode: 0o755 },
    { kind: "dir", path: "blobs/sha256", mode: 0o755 },
    ...blobs,
  ]);
}

/**
 * The image whose one layer holds busybox (a static binary) as /bin/busybox
 * with /bin/sh pointing at it, as the runtime probe and the test image. Its
 * default command is a shell; the probe and pods give their own.
 */
export function busyboxImage(busybox: Uint8Array): Uint8Array {
  if (busybox.length === 0) throw new ImageBuildError("busybox binary is empty");
  return ociImage([PROBE_IMAGE_REF, TEST_IMAGE_REF], [busyboxLayer(busybox)], { Env: ["PATH=/bin"], Cmd: ["/bin/sh"] });
}

/**
 * busybox as /bin/busybox with each of `applets` (by default just sh) a link
 * to it in /bin, and the directories a container needs.
 */
export function busyboxLayer(busybox: Uint8Array, applets: readonly string[] = ["sh"]): TarEntry[] {
  return [
    { kind: "dir", path: "bin", mode: 0o755 },
    { kind: "file", path: "bin/busybox", mode: 0o755, contents: busybox },
    ...applets.map((applet): TarEntry => ({ kind: "symlink", path: `bin/${applet}`, target: "busybox" })),
    { kind: "dir", path: "proc", mode: 0o755 },
    { kind: "dir", path: "sys", mode: 0o755 },
    { kind: "dir", path: "dev", mode: 0o755 },
    { kind: "dir", path: "etc", mode: 0o755 },
    { kind: "dir", path: "tmp", mode: 0o1777 },
  ];
}

/** The port the hello image serves HTTP on. */
export const HELLO_PORT = 8080;

/**
 * A user's application as the README and the tests pull it from a registry:
 * two layers, busybox below and the application above (a page and the
 * command that serves it: busybox's httpd on HELLO_PORT). `ref` names it;
 * `message` is the page, so that two builds can be told apart.
 */
export function helloImage(busybox: Uint8Array, ref: string, message = "hello from nodecore"): Uint8Array {
  if (busybox.length === 0) throw new ImageBuildError("busybox binary is empty");
  const page = new TextEncoder().encode(`${message}\n`);
  return ociImage(
    [ref],
    [
      busyboxLayer(busybox),
      [
        { kind: "dir", path: "app", mode: 0o755 },
        { kind: "file", path: "app/index.html", mode: 0o644, contents: page },
      ],
    ],
    { Env: ["PATH=/bin"], Cmd: ["/bin/busybox", "httpd", "-f", "-v", "-p", String(HELLO_PORT), "-h", "/app"], ExposedPorts: { [`${HELLO_PORT}/tcp`]: {} } },
  );
}

/** The sandbox image: the static pause program (image/pause.c) as /pause, its entrypoint; named `ref` (the conformance suite names its own). */
export function pauseImage(pause: Uint8Array, refs: readonly string[] = [SANDBOX_IMAGE_REF]): Uint8Array {
  if (pause.length === 0) throw new ImageBuildError("pause binary is empty");
  return ociImage(refs, [[{ kind: "file", path: "pause", mode: 0o755, contents: pause }]], { Entrypoint: ["/pause"], User: "65535:65535" });
}

/** Where Debian's busybox-static puts busybox on the build host. */
export const HOST_BUSYBOX = "/bin/busybox";

/** The busybox binary at `path` (Debian's busybox-static: /bin/busybox), or an error naming the package. */
export function readBusybox(path: string): Uint8Array {
  try {
    return readFileSync(path);
  } catch (error) {
    throw new ImageBuildError(`could not read ${path} for the busybox image and the kubelet's mount tools (Debian package busybox-static): ${(error as Error).message}`, { cause: error });
  }
}
