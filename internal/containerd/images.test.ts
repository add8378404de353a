import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { helloImage } from "../../image/oci.ts";
import { formatBytes } from "../log/mod.ts";
import { systemTree, tempDir } from "../testing/mod.ts";
import { contentPath, containerdConfig, CRI_NAMESPACE, ctr, imageSize, imageStore, namedImages, NODE_PLATFORM, runtimePaths } from "./mod.ts";

const json = (value: unknown) => JSON.stringify(value);
/** "1.5 KiB" → 1536. */
const bytesOf = (size: string) => {
  const [value = "", unit = ""] = size.split(" ");
  return Number(value) * 1024 ** ["B", "KiB", "MiB", "GiB"].indexOf(unit);
};
const digest = (n: number) => `sha256:${String(n).repeat(64).slice(0, 64)}`;

/** A content store below `root` holding `documents` (digest → JSON). */
function contentStore(root: string, documents: Record<string, string>): void {
  for (const [name, text] of Object.entries(documents)) {
    const path = contentPath(root, name);
    mkdirSync(join(path, ".."), { recursive: true });
    writeFileSync(path, text);
  }
}

describe("an image's size, added up from the content store as ctr does", () => {
  const manifest = json({
    schemaVersion: 2,
    config: { digest: digest(3), size: 500 },
    layers: [
      { digest: digest(4), size: 1000 },
      { digest: digest(5), size: 2000 },
    ],
  });
  const index = json({
    schemaVersion: 2,
    manifests: [
      { digest: digest(6), size: 99, platform: { os: "linux", architecture: "s390x" } },
      { digest: digest(2), size: manifest.length, platform: NODE_PLATFORM },
    ],
  });

  test("a manifest: itself, its configuration and its layers", () => {
    using dir = tempDir("images");
    contentStore(dir.path, { [digest(2)]: manifest });
    expect(imageSize(dir.path, { digest: digest(2), size: manifest.length })).toBe(manifest.length + 3500);
  });

  test("an index: itself, then this node's platform's manifest (not another's)", () => {
    using dir = tempDir("images");
    contentStore(dir.path, { [digest(1)]: index, [digest(2)]: manifest });
    expect(imageSize(dir.path, { digest: digest(1), size: index.length })).toBe(index.length + manifest.length + 3500);
  });

  test("unknown when a document on the way is missing, not JSON, or names no platform of this node's", () => {
    using dir = tempDir("images");
    contentStore(dir.path, { [digest(1)]: index, [digest(7)]: "not json", [digest(8)]: json({ manifests: [{ digest: digest(6), size: 99, platform: { os: "linux", architecture: "s390x" } }] }) });
    expect(imageSize(dir.path, { digest: digest(1), size: 1 })).toBeUndefined();
    expect(imageSize(dir.path, { digest: digest(7), size: 1 })).toBeUndefined();
    expect(imageSize(dir.path, { digest: digest(8), size: 1 })).toBeUndefined();
    expect(imageSize(dir.path, { digest: "../../etc/passwd", size: 1 })).toBeUndefined();
  });

  test("the named records only (CRI adds one by ID and one by name@digest), sorted, with sizes people read", () => {
    using dir = tempDir("images");
    contentStore(dir.path, { [digest(2)]: manifest });
    const target = { digest: digest(2), size: BigInt(manifest.length) };
    const listed = namedImages(dir.path, [
      { name: "registry.example.com/b:1", target },
      { name: `sha256:${"e".repeat(64)}`, target },
      { name: `registry.example.com/b@${digest(2)}`, target },
      { name: "registry.example.com/a:1", target: { digest: digest(9), size: 10n } },
      { name: "no-target:1" },
    ]);
    expect(listed).toEqual([
      { name: "registry.example.com/a:1", digest: digest(9), size: "-" },
      { name: "registry.example.com/b:1", digest: digest(2), size: formatBytes(manifest.length + 3500) },
    ]);
  });
});

describe("the image store against the built containerd (its API over its socket)", () => {
  using dir = tempDir("ctd-images");
  const paths = runtimePaths(join(dir.path, "data"), join(dir.path, "run"), "/sys/fs/cgroup", "t", systemTree());
  let containerd: ReturnType<typeof Bun.spawn> | undefined;

  beforeAll(async () => {
    mkdirSync(paths.state, { recursive: true });
    mkdirSync(paths.root, { recursive: true });
    writeFileSync(paths.config, containerdConfig(paths, { cri: false }));
    containerd = Bun.spawn([join(systemTree(), "usr", "bin", "containerd"), "--config", paths.config], { stdout: "ignore", stderr: Bun.file(join(dir.path, "containerd.log")) });
    const deadline = Date.now() + 20_000;
    while (!existsSync(paths.socket)) {
      if (Date.now() > deadline || containerd.exitCode !== null) throw new Error(`containerd made no socket: ${await Bun.file(join(dir.path, "containerd.log")).text()}`);
      await Bun.sleep(100);
    }
  }, 30_000);

  afterAll(async () => {
    containerd?.kill();
    await containerd?.exited;
  });

  test("an imported bundle is listed by name, digest and size, and nothing else", async () => {
    const store = imageStore(paths);
    expect(await store.list()).toEqual([]);
    const bundle = join(dir.path, "hello.oci.tar");
    writeFileSync(bundle, helloImage(new Uint8Array(300_000).fill(7), "registry.example.com/apps/hello:1"));
    expect(await store.importBundle(bundle)).toEqual(["registry.example.com/apps/hello:1"]);
    const listed = await store.list();
    expect(listed.map((i) => i.name)).toEqual(["registry.example.com/apps/hello:1"]);
    expect(listed[0]!.digest).toMatch(/^sha256:[0-9a-f]{64}$/);
    // The same size ctr counts (it prints one decimal; the listing rounds to whole units from 10 on).
    const ctrSays = (await ctr(paths, ["images", "ls"], undefined, CRI_NAMESPACE)).split("\n").find((l) => l.startsWith("registry.example.com/apps/hello:1 "));
    const [, digestByCtr, sizeByCtr] = /(sha256:[0-9a-f]{64})\s+([\d.]+ [KMG]?i?B)\s/.exec(ctrSays ?? "") ?? [];
    expect(listed[0]!.digest).toBe(digestByCtr!);
    expect(Math.abs(bytesOf(listed[0]!.size) / bytesOf(sizeByCtr!) - 1)).toBeLessThan(0.01);
  }, 60_000);
});
