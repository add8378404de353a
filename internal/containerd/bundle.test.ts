import { describe, expect, test } from "bun:test";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { helloImage, tarArchive } from "../../image/oci.ts";
import { tempDir } from "../testing/mod.ts";
import { checkImageBundle } from "./mod.ts";

const busybox = new Uint8Array(4096).fill(7);
const hello = helloImage(busybox, "registry.example.com/apps/hello:1");
const json = (value: unknown) => new TextEncoder().encode(JSON.stringify(value));

/** The bundle's bytes written to a file; what checkImageBundle says of it (or the message it refuses it with). */
async function check(bytes: Uint8Array): Promise<string[] | string> {
  using dir = tempDir();
  const file = join(dir.path, "bundle.tar");
  writeFileSync(file, bytes);
  try {
    return (await checkImageBundle(file)).images;
  } catch (err) {
    return (err as Error).message;
  }
}

describe("offline image bundles are checked whole before anything is imported", () => {
  test("an OCI image layout of two layers: its names, each with the digest its index points it at", async () => {
    expect(await check(hello)).toEqual(["registry.example.com/apps/hello:1"]);
    using dir = tempDir();
    const file = join(dir.path, "bundle.tar");
    writeFileSync(file, hello);
    const checked = await checkImageBundle(file);
    const index = JSON.parse(new TextDecoder().decode(hello).match(/\{"schemaVersion":2,"mediaType":"application\/vnd\.oci\.image\.index\.v1\+json".*?\]\}/)![0]) as {
      manifests: { digest: string }[];
    };
    expect(checked.digests).toEqual(new Map([["registry.example.com/apps/hello:1", index.manifests[0]!.digest]]));
  });

  test("a docker save tar: its RepoTags, every file it names present", async () => {
    const layer = tarArchive([{ kind: "file", path: "hello.txt", mode: 0o644, contents: new TextEncoder().encode("hi") }]);
    const saved = tarArchive([
      { kind: "file", path: "manifest.json", mode: 0o644, contents: json([{ Config: "config.json", RepoTags: ["app:2"], Layers: ["layer/layer.tar"] }]) },
      { kind: "file", path: "config.json", mode: 0o644, contents: json({ architecture: "amd64", os: "linux" }) },
      { kind: "dir", path: "layer", mode: 0o755 },
      { kind: "file", path: "layer/layer.tar", mode: 0o644, contents: layer },
    ]);
    expect(await check(saved)).toEqual(["app:2"]);
    const missing = tarArchive([{ kind: "file", path: "manifest.json", mode: 0o644, contents: json([{ Config: "config.json", RepoTags: ["app:2"], Layers: [] }]) }]);
    expect(await check(missing)).toBe('"config.json", named in manifest.json, is not in the bundle');
  });

  test("truncated anywhere: refused, saying so", async () => {
    for (const cut of [100, 512 + 100, Math.floor(hello.length / 2), hello.length - 1024]) {
      const said = await check(hello.subarray(0, cut));
      expect(typeof said === "string" && /cut short|truncated/.test(said)).toBe(true);
    }
    expect(await check(new Uint8Array())).toBe("the file is empty");
  });

  test("not an image: not a tar, or a tar without an index", async () => {
    expect(await check(new TextEncoder().encode("hello world, this is no tar".repeat(30)))).toBe("not a tar file (an OCI image layout or docker save tar)");
    expect(await check(tarArchive([{ kind: "file", path: "notes.txt", mode: 0o644, contents: new TextEncoder().encode("x") }]))).toBe(
      "not an image bundle: the tar holds neither an OCI image layout (oci-layout, index.json) nor docker save's manifest.json",
    );
  });

  test("a blob whose bytes are not its digest, or a layer the manifest names that is not there", async () => {
    const tampered = new Uint8Array(hello);
    // The busybox stand-in's bytes (7s) sit in the first layer's blob: change one.
    const at = Buffer.from(tampered).indexOf(Buffer.from(new Uint8Array(64).fill(7)));
    tampered[at] = 8;
    expect(await check(tampered)).toMatch(/^blobs\/sha256\/[0-9a-f]{64}: its bytes do not match its digest/);
  });

  test("an index without a full image name", async () => {
    using dir = tempDir();
    // Rename the image to a bare tag: index.json's annotations change, and so its bytes (not a blob).
    const text = Buffer.from(hello).toString("latin1").replaceAll("registry.example.com/apps/hello:1", "1".padEnd(33, " "));
    expect(await check(Buffer.from(text, "latin1"))).toContain("has no full image name");
    void dir;
  });
});

/** The tar's first header given another type flag, its checksum made right again. */
function retyped(tar: Uint8Array, type: string): Uint8Array {
  const out = new Uint8Array(tar);
  out[156] = type.charCodeAt(0);
  out.fill(32, 148, 156);
  const sum = out.subarray(0, 512).reduce((a, b) => a + b, 0);
  out.set(new TextEncoder().encode(sum.toString(8).padStart(6, "0") + "\0 "), 148);
  return out;
}

describe("a bundle that containerd's reader would read otherwise is refused", () => {
  const file = (path: string, text: string) => ({ kind: "file" as const, path, mode: 0o644, contents: new TextEncoder().encode(text) });

  test("a PAX or GNU extended header (which could rename or resize a member for Go's reader)", async () => {
    for (const type of ["x", "g", "L"]) expect(await check(retyped(tarArchive([file("pax", "path=index.json\n"), file("notes.txt", "x")]), type))).toContain("extended headers");
  });

  test("a name path cleaning would change, and a name twice", async () => {
    expect(await check(tarArchive([file("x/./index.json", "{}")]))).toBe('the tar names a file "x/./index.json", which is no plain path');
    expect(await check(tarArchive([file("index.json", "{}"), file("index.json", "{}")]))).toBe('the tar holds "index.json" twice');
  });

  test("index.json without oci-layout is not an OCI layout (containerd would read manifest.json instead)", async () => {
    expect(await check(tarArchive([file("index.json", "{}")]))).toContain("no oci-layout file");
  });

  test("a bundle that would replace the node's own images", async () => {
    expect(await check(helloImage(busybox, "nodecore.local/pause:1"))).toContain("one of the node's own images");
  });

  test("an index naming one manifest many times is walked once per manifest, and the names it may hold in all are bounded", async () => {
    const blob = (text: string) => {
      const contents = new TextEncoder().encode(text);
      const digest = `sha256:${new Bun.CryptoHasher("sha256").update(contents).digest("hex")}`;
      return { digest, size: contents.length, entry: file(`blobs/sha256/${digest.slice(7)}`, text) };
    };
    const layer = blob("layer");
    const config = blob(JSON.stringify({ architecture: "amd64", os: "linux", rootfs: { type: "layers", diff_ids: [layer.digest] } }));
    const manifest = blob(JSON.stringify({ schemaVersion: 2, config: { digest: config.digest, size: config.size }, layers: [{ digest: layer.digest, size: layer.size }] }));
    const fanOut = (times: number) => {
      const index = blob(
        JSON.stringify({ schemaVersion: 2, mediaType: "application/vnd.oci.image.index.v1+json", manifests: Array.from({ length: times }, () => ({ digest: manifest.digest, size: manifest.size })) }),
      );
      return tarArchive([
        file("oci-layout", JSON.stringify({ imageLayoutVersion: "1.0.0" })),
        file(
          "index.json",
          JSON.stringify({
            manifests: [{ mediaType: "application/vnd.oci.image.index.v1+json", digest: index.digest, size: index.size, annotations: { "io.containerd.image.name": "example.com/app:1" } }],
          }),
        ),
        { kind: "dir", path: "blobs", mode: 0o755 },
        { kind: "dir", path: "blobs/sha256", mode: 0o755 },
        layer.entry,
        config.entry,
        manifest.entry,
        index.entry,
      ]);
    };
    expect(await check(fanOut(5_000))).toEqual(["example.com/app:1"]);
    expect(await check(fanOut(20_000))).toBe("its indexes name more than 10000 manifests");
  });
});
