import { describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, readlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../internal/testing/mod.ts";
import { busyboxImage, pauseImage, PROBE_IMAGE_REF, SANDBOX_IMAGE_REF, TEST_IMAGE_REF, tarArchive } from "./oci.ts";

const sha256 = (data: Uint8Array) => new Bun.CryptoHasher("sha256").update(data).digest("hex");

/** Unpacks with the host's GNU tar: the archive must be one a real tar reads. */
function untar(archive: Uint8Array, dir: string): string[] {
  const file = join(dir, "archive.tar");
  writeFileSync(file, archive);
  const out = join(dir, "x");
  mkdirSync(out);
  const extract = Bun.spawnSync(["tar", "-xf", file, "-C", out]);
  expect(extract.exitCode).toBe(0);
  const list = Bun.spawnSync(["tar", "-tvf", file]);
  expect(list.exitCode).toBe(0);
  return list.stdout.toString().trim().split("\n");
}

describe("tarArchive", () => {
  test("GNU tar reads files, directories and symlinks, owned by root with mtime 0", () => {
    using dir = tempDir("tar");
    const listing = untar(
      tarArchive([
        { kind: "dir", path: "a", mode: 0o755 },
        { kind: "file", path: "a/f", mode: 0o640, contents: new TextEncoder().encode("x".repeat(700)) },
        { kind: "symlink", path: "a/l", target: "f" },
      ]),
      dir.path,
    );
    expect(listing).toHaveLength(3);
    expect(listing[0]).toMatch(/^drwxr-xr-x root\/root\s+0 1970-01-01 00:00 a\/$/);
    expect(listing[1]).toMatch(/^-rw-r----- root\/root\s+700 1970-01-01 00:00 a\/f$/);
    expect(listing[2]).toMatch(/^lrwxrwxrwx root\/root\s+0 1970-01-01 00:00 a\/l -> f$/);
    expect(readFileSync(join(dir.path, "x/a/f"), "utf8")).toBe("x".repeat(700));
    expect(readlinkSync(join(dir.path, "x/a/l"))).toBe("f");
  });

  test("refuses absolute and escaping paths", () => {
    expect(() => tarArchive([{ kind: "dir", path: "/etc", mode: 0o755 }])).toThrow(/invalid tar path/);
    expect(() => tarArchive([{ kind: "file", path: "a/../../b", mode: 0o644, contents: new Uint8Array() }])).toThrow(/invalid tar path/);
  });
});

describe("busyboxImage", () => {
  test("is an OCI layout whose digests, sizes and diff_ids match the blobs, and is reproducible", () => {
    using dir = tempDir("oci");
    const fakeBusybox = new TextEncoder().encode("#!busybox stand-in bytes\n");
    const image = busyboxImage(fakeBusybox);
    expect(Buffer.from(busyboxImage(fakeBusybox)).equals(Buffer.from(image))).toBe(true);
    untar(image, dir.path);
    const root = join(dir.path, "x");
    const read = (path: string) => readFileSync(join(root, path));
    const blobOf = (digest: string) => read(`blobs/sha256/${digest.replace(/^sha256:/, "")}`);
    expect(JSON.parse(read("oci-layout").toString())).toEqual({ imageLayoutVersion: "1.0.0" });

    const index = JSON.parse(read("index.json").toString());
    // One image under two names: the runtime probe's and the test image pods use.
    expect(index.manifests.map((m: { annotations: Record<string, string> }) => m.annotations["org.opencontainers.image.ref.name"])).toEqual([PROBE_IMAGE_REF, TEST_IMAGE_REF]);
    expect(index.manifests[1].digest).toBe(index.manifests[0].digest);
    const manifestRef = index.manifests[0];
    const manifestBytes = blobOf(manifestRef.digest);
    expect(`sha256:${sha256(manifestBytes)}`).toBe(manifestRef.digest);
    expect(manifestBytes.length).toBe(manifestRef.size);

    const manifest = JSON.parse(manifestBytes.toString());
    const configBytes = blobOf(manifest.config.digest);
    expect(`sha256:${sha256(configBytes)}`).toBe(manifest.config.digest);
    const config = JSON.parse(configBytes.toString());
    expect(config.os).toBe("linux");
    expect(config.architecture).toBe("amd64");
    expect(manifest.layers).toHaveLength(1);
    const layerBytes = blobOf(manifest.layers[0].digest);
    expect(`sha256:${sha256(layerBytes)}`).toBe(manifest.layers[0].digest);
    expect(layerBytes.length).toBe(manifest.layers[0].size);
    // Uncompressed layer: its diff_id is its own digest.
    expect(config.rootfs.diff_ids).toEqual([manifest.layers[0].digest]);

    const layerDir = join(dir.path, "layer");
    mkdirSync(layerDir);
    writeFileSync(join(layerDir, "layer.tar"), layerBytes);
    expect(Bun.spawnSync(["tar", "-xf", join(layerDir, "layer.tar"), "-C", layerDir]).exitCode).toBe(0);
    expect(readFileSync(join(layerDir, "bin/busybox"))).toEqual(Buffer.from(fakeBusybox));
    expect(readlinkSync(join(layerDir, "bin/sh"))).toBe("busybox");
  });
});

describe("pauseImage", () => {
  test("holds the pause program as /pause, its entrypoint, as an unprivileged user, under the sandbox name", () => {
    using dir = tempDir("oci");
    const pause = new TextEncoder().encode("pause bytes");
    untar(pauseImage(pause), dir.path);
    const root = join(dir.path, "x");
    const read = (path: string) => readFileSync(join(root, path));
    const index = JSON.parse(read("index.json").toString());
    expect(index.manifests.map((m: { annotations: Record<string, string> }) => m.annotations["io.containerd.image.name"])).toEqual([SANDBOX_IMAGE_REF]);
    const manifest = JSON.parse(read(`blobs/sha256/${index.manifests[0].digest.slice(7)}`).toString());
    const config = JSON.parse(read(`blobs/sha256/${manifest.config.digest.slice(7)}`).toString());
    expect(config.config).toEqual({ Entrypoint: ["/pause"], User: "65535:65535" });
    const layer = join(dir.path, "layer");
    mkdirSync(layer);
    writeFileSync(join(layer, "layer.tar"), read(`blobs/sha256/${manifest.layers[0].digest.slice(7)}`));
    expect(Bun.spawnSync(["tar", "-xf", join(layer, "layer.tar"), "-C", layer]).exitCode).toBe(0);
    expect(readFileSync(join(layer, "pause"))).toEqual(Buffer.from(pause));
  });
});
