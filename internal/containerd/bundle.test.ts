import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { helloImage, tarArchive } from "../../image/oci.ts";
import { tempDir } from "../testing/mod.ts";
import { checkImageBundle, parseImageListing } from "./mod.ts";

const busybox = new Uint8Array(4096).fill(7);
const hello = helloImage(busybox, "registry.example.com/apps/hello:1");
const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** The bundle's bytes written to a file; what checkImageBundle says of it (or the message it refuses it with). */
function check(bytes: Uint8Array): string[] | string {
  using dir = tempDir();
  const file = join(dir.path, "bundle.tar");
  writeFileSync(file, bytes);
  try {
    return checkImageBundle(file).images;
  } catch (err) {
    return (err as Error).message;
  }
}

describe("offline image bundles are checked whole before anything is imported", () => {
  test("an OCI image layout of two layers: its names", () => {
    expect(check(hello)).toEqual(["registry.example.com/apps/hello:1"]);
  });

  test("a docker save tar: its RepoTags, every file it names present", () => {
    const layer = tarArchive([{ kind: "file", path: "hello.txt", mode: 0o644, contents: new TextEncoder().encode("hi") }]);
    const saved = tarArchive([
      { kind: "file", path: "manifest.json", mode: 0o644, contents: json([{ Config: "config.json", RepoTags: ["app:2"], Layers: ["layer/layer.tar"] }]) },
      { kind: "file", path: "config.json", mode: 0o644, contents: json({ architecture: "amd64", os: "linux" }) },
      { kind: "dir", path: "layer", mode: 0o755 },
      { kind: "file", path: "layer/layer.tar", mode: 0o644, contents: layer },
    ]);
    expect(check(saved)).toEqual(["app:2"]);
    const missing = tarArchive([{ kind: "file", path: "manifest.json", mode: 0o644, contents: json([{ Config: "config.json", RepoTags: ["app:2"], Layers: [] }]) }]);
    expect(check(missing)).toBe('"config.json", named in manifest.json, is not in the bundle');
  });

  test("truncated anywhere: refused, saying so", () => {
    for (const cut of [100, 512 + 100, Math.floor(hello.length / 2), hello.length - 1024]) {
      const said = check(hello.subarray(0, cut));
      expect(typeof said === "string" && /cut short|truncated/.test(said)).toBe(true);
    }
    expect(check(new Uint8Array())).toBe("the file is empty");
  });

  test("not an image: not a tar, or a tar without an index", () => {
    expect(check(new TextEncoder().encode("hello world, this is no tar".repeat(30)))).toBe("not a tar file (an OCI image layout or docker save tar)");
    expect(check(tarArchive([{ kind: "file", path: "notes.txt", mode: 0o644, contents: new TextEncoder().encode("x") }]))).toBe(
      "not an image bundle: the tar holds neither index.json (an OCI image layout) nor manifest.json (docker save)",
    );
  });

  test("a blob whose bytes are not its digest, or a layer the manifest names that is not there", () => {
    const tampered = new Uint8Array(hello);
    // The busybox stand-in's bytes (7s) sit in the first layer's blob: change one.
    const at = Buffer.from(tampered).indexOf(Buffer.from(new Uint8Array(64).fill(7)));
    tampered[at] = 8;
    expect(check(tampered)).toMatch(/^blobs\/sha256\/[0-9a-f]{64}: its bytes do not match its digest/);
  });

  test("an index without a full image name", () => {
    using dir = tempDir();
    // Rename the image to a bare tag: index.json's annotations change, and so its bytes (not a blob).
    const text = Buffer.from(hello).toString("latin1").replaceAll("registry.example.com/apps/hello:1", "1".padEnd(33, " "));
    expect(check(Buffer.from(text, "latin1"))).toContain("has no full image name");
    void dir;
  });
});

test("ctr's image listing: named images only, with digest and size", () => {
  const output = [
    "REF                                                                     TYPE                                       DIGEST                                                                  SIZE    PLATFORMS   LABELS                          ",
    `nodecore.test/hello:1                                                   application/vnd.oci.image.manifest.v1+json sha256:${"1".repeat(64)} 1.9 MiB linux/amd64 io.cri-containerd.image=managed `,
    `sha256:${"e".repeat(64)} application/vnd.oci.image.manifest.v1+json sha256:${"1".repeat(64)} 1.9 MiB linux/amd64 io.cri-containerd.image=managed `,
    `nodecore.test/hello@sha256:${"1".repeat(64)} application/vnd.oci.image.manifest.v1+json sha256:${"1".repeat(64)} 1.9 MiB linux/amd64 -`,
  ].join("\n");
  expect(parseImageListing(output)).toEqual([{ name: "nodecore.test/hello:1", digest: `sha256:${"1".repeat(64)}`, size: "1.9 MiB" }]);
});
