// The node's side of the slots: the boot record, and where
// it goes when the slot it booted must not run.

import { describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { storageLayout, type Slot } from "../localstorage/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { compareVersions, parseBundleManifest, readBootRecord, readSlotFailure, refuseBootedSlot, writeBootRecord } from "./mod.ts";

/** A node root whose ESP holds these slots' boot files (by version) and this record. */
function node(slots: Partial<Record<Slot, string>>, record?: string) {
  const dir = tempDir("nodecore-update-");
  const layout = storageLayout(dir.path);
  mkdirSync(dirname(layout.esp.boot), { recursive: true });
  for (const [slot, version] of Object.entries(slots) as [Slot, string][]) {
    const files = layout.esp.slot(slot);
    mkdirSync(files.dir, { recursive: true });
    for (const file of [files.kernel, files.initramfs, files.cmdline]) writeFileSync(file, "x");
    writeFileSync(files.version, `${version}\n`);
  }
  if (record !== undefined) writeFileSync(layout.esp.boot, record);
  return { dir, layout };
}

describe("the boot record", () => {
  test("reads as the slot choice reads it: slot a when there is none, bad lines ignored", () => {
    const { dir, layout } = node({});
    using _ = dir;
    expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
    writeFileSync(layout.esp.boot, "active=c\nnext=b\ngarbage\n");
    expect(readBootRecord(layout)).toEqual({ active: "a", next: "b" });
  });

  test("is written back in its format, without a next equal to active", () => {
    const { dir, layout } = node({}, "active=a\n");
    using _ = dir;
    writeBootRecord(layout, { active: "b", next: "a" });
    expect(readFileSync(layout.esp.boot, "utf8")).toBe("active=b\nnext=a\n");
    writeBootRecord(layout, { active: "b", next: "b" });
    expect(readFileSync(layout.esp.boot, "utf8")).toBe("active=b\n");
  });
});

describe("a booted slot that must not run", () => {
  test("hands the node to the other slot, which becomes active, and notes why", () => {
    const { dir, layout } = node({ a: "v1", b: "v2" }, "active=b\n");
    using _ = dir;
    expect(refuseBootedSlot(layout, "b", "block 7 does not match", 1234)).toEqual({ kind: "reboot", to: "a", version: "v1" });
    expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
    expect(readSlotFailure(layout, "b")).toEqual({ slot: "b", version: "v2", reason: "block 7 does not match", timeMs: 1234 });
  });

  test("as a trial (the slot choice cleared next already), leaves the old slot active", () => {
    const { dir, layout } = node({ a: "v1", b: "v2" }, "active=a\n");
    using _ = dir;
    expect(refuseBootedSlot(layout, "b", "bad")).toMatchObject({ kind: "reboot", to: "a" });
    expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
  });

  test("halts when the other slot holds no system", () => {
    const { dir, layout } = node({ a: "v1" }, "active=a\n");
    using _ = dir;
    const refusal = refuseBootedSlot(layout, "a", "block 7 does not match");
    expect(refusal).toEqual({ kind: "halt", why: "slot a (version v1) cannot boot: block 7 does not match; slot b holds no system to fall back to" });
    expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
  });

  test("halts rather than loop when the other slot failed too", () => {
    const { dir, layout } = node({ a: "v1", b: "v2" }, "active=a\n");
    using _ = dir;
    expect(refuseBootedSlot(layout, "a", "first")).toMatchObject({ kind: "reboot", to: "b" });
    expect(refuseBootedSlot(layout, "b", "second")).toEqual({ kind: "halt", why: "slot b (version v2) cannot boot: second; slot a (version v1) failed too: first" });
  });
});

describe("an update bundle's description", () => {
  const file = (bytes: number) => ({ bytes, sha256: "ab".repeat(32) });
  const good = { format: 1, version: "0.2.0+abc1234", arch: "x86_64", files: { system: file(70 << 20), kernel: file(8 << 20), initramfs: file(77 << 20), version: file(14), cmdline: file(120) } };
  const text = (change: (m: Record<string, any>) => void) => {
    const m = structuredClone(good) as Record<string, any>;
    change(m);
    return JSON.stringify(m);
  };

  test("is read when every file is listed with a size and digest that fit", () => {
    expect(parseBundleManifest(JSON.stringify(good))).toEqual(good);
  });

  test.each([
    ["not JSON", () => "{", /is not JSON/],
    ["another format", () => text((m) => (m.format = 2)), /format "2"; this node reads format 1/],
    ["a version with a space", () => text((m) => (m.version = "1.0 beta")), /no valid version: "1.0 beta"/],
    ["no kernel", () => text((m) => delete m.files.kernel), /lists no kernel/],
    ["a system larger than its partition", () => text((m) => (m.files.system.bytes = 300 << 20)), /system is 314572800 bytes, more than the 268435456 its place holds/],
    ["a negative size", () => text((m) => (m.files.cmdline.bytes = -1)), /cmdline has no valid size/],
    ["an upper-case digest", () => text((m) => (m.files.kernel.sha256 = "AB".repeat(32))), /kernel has no valid sha256/],
    ["a file no slot has", () => text((m) => (m.files["../../etc/passwd"] = file(1))), /lists files no slot has: "..\/..\/etc\/passwd"/],
    ["chunks for a file that has none", () => text((m) => (m.files.kernel.chunks = ["ab".repeat(32)])), /kernel lists chunks; only initramfs may/],
    ["fewer chunks than the file has MiBs", () => text((m) => (m.files.initramfs.chunks = ["ab".repeat(32)])), /initramfs must list 77 chunks of 1048576 bytes, not 1/],
    ["chunks that are not a list", () => text((m) => (m.files.initramfs.chunks = "ab")), /initramfs must list 77 chunks of 1048576 bytes, not "ab"/],
    ["a Kubernetes version that is none", () => text((m) => (m.kubernetes = "latest")), /no valid Kubernetes version: "latest"/],
    ["a Kubernetes version that is no string", () => text((m) => (m.kubernetes = 37)), /no valid Kubernetes version: "37"/],
    ["a chunk that is no digest", () => text((m) => (m.files.initramfs.chunks = [...Array(76).fill("ab".repeat(32)), 7])), /initramfs's chunk 76 has no valid sha256: "7"/],
  ])("is refused with %s", (_, input, why) => {
    expect(() => parseBundleManifest(input())).toThrow(why);
  });

  test("is read with the initramfs's chunks, one digest a MiB", () => {
    const chunked = structuredClone(good) as typeof good & { files: { initramfs: { chunks?: string[] } } };
    chunked.files.initramfs.chunks = Array.from({ length: 77 }, (_, i) => i.toString(16).padStart(64, "0"));
    expect(parseBundleManifest(JSON.stringify(chunked))).toEqual(chunked);
  });

  test("is read with the Kubernetes version its software carries, and without one (bundles built before it was written)", () => {
    expect(parseBundleManifest(text((m) => (m.kubernetes = "v1.38.0"))).kubernetes).toBe("v1.38.0");
    expect("kubernetes" in parseBundleManifest(JSON.stringify(good))).toBe(false);
  });

  test("quotes hostile values in part only", () => {
    expect(() => parseBundleManifest(text((m) => (m.version = "x".repeat(10_000))))).toThrow(/^bundle\.json has no valid version: "x{80}…"$/);
  });
});

describe("versions", () => {
  test.each([
    ["0.1.0+abc", "0.2.0+abc", -1],
    ["0.10.0", "0.9.9", 1],
    ["1.0.0+aaa", "1.0.0+bbb", 0],
    ["1.0", "1.0.0", 0],
    ["2", "10", -1],
  ])("%s against %s", (a, b, sign) => {
    expect(Math.sign(compareVersions(a, b))).toBe(sign);
  });
});
