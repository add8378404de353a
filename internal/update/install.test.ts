// Writing a bundle into the slot that is not booted: what is checked before
// anything is written, what a bad or short stream leaves behind, and what a
// good one installs.

import { describe, expect, test } from "bun:test";
import { closeSync, existsSync, mkdirSync, openSync, readdirSync, readFileSync, rmSync, writeFileSync, writeSync } from "node:fs";
import { dirname, join } from "node:path";
import { exclusively, SCRUB_FILLER, storageLayout } from "../localstorage/mod.ts";
import { runCommand } from "../supervisor/mod.ts";
import { eventually, tempDir } from "../testing/mod.ts";
import { BUNDLE_CHUNK_BYTES, BUNDLE_FILES, NODE_ARCH, readBootRecord, SlotWriter, type BundleManifest } from "./mod.ts";

const SYSTEM_PARTITION_BYTES = 1 << 20;

function sha256(bytes: Uint8Array): string {
  return new Bun.CryptoHasher("sha256").update(bytes).digest("hex");
}

/** A node booted from slot a (v1), with an empty slot b, and a bundle (v2) for it. */
function setup() {
  const dir = tempDir("nodecore-install-");
  const layout = storageLayout(dir.path);
  const a = layout.esp.slot("a");
  mkdirSync(a.dir, { recursive: true });
  for (const file of [a.kernel, a.initramfs, a.cmdline]) writeFileSync(file, "slot a");
  writeFileSync(a.version, "0.1.0\n");
  writeFileSync(layout.esp.boot, "active=a\n");
  mkdirSync(layout.data.path, { recursive: true });
  const systemDevice = join(dir.path, "system-b.img");
  writeFileSync(systemDevice, new Uint8Array(SYSTEM_PARTITION_BYTES));
  const bootedSystemDevice = join(dir.path, "system-a.img");
  writeFileSync(bootedSystemDevice, new Uint8Array(SYSTEM_PARTITION_BYTES).fill(0xa));
  const contents: Record<(typeof BUNDLE_FILES)[number], Uint8Array> = {
    system: crypto.getRandomValues(new Uint8Array(300_000)),
    kernel: crypto.getRandomValues(new Uint8Array(50_000)),
    initramfs: crypto.getRandomValues(new Uint8Array(2_500_000).subarray(0, 65_536)),
    version: Buffer.from("0.2.0\n"),
    cmdline: Buffer.from("console=ttyS0 nodecore.system=1,4096," + "a".repeat(64) + "\n"),
  };
  const manifest: BundleManifest = {
    format: 1,
    version: "0.2.0",
    arch: NODE_ARCH,
    files: Object.fromEntries(BUNDLE_FILES.map((name) => [name, { bytes: contents[name].length, sha256: sha256(contents[name]) }])) as BundleManifest["files"],
  };
  const stream = Buffer.concat(BUNDLE_FILES.map((name) => contents[name]));
  const options = {
    layout,
    booted: "a" as const,
    trial: false,
    currentVersion: "0.1.0",
    allowDowngrade: false,
    systemDevice: { path: systemDevice, bytes: SYSTEM_PARTITION_BYTES },
    bootedSystemDevice,
  };
  return { dir, layout, contents, manifest, stream, options, systemDevice, bootedSystemDevice };
}

/** Sends the stream in uneven chunks, as a network would deliver it. */
async function send(writer: SlotWriter, stream: Uint8Array): Promise<void> {
  const sizes = [1, 4095, 65_536, 7, 300_001];
  for (let offset = 0, i = 0; offset < stream.length; i++) {
    const size = sizes[i % sizes.length]!;
    await writer.write(stream.subarray(offset, offset + size));
    offset += size;
  }
}

describe("writing an update into the other slot", () => {
  test("installs every file where the slot choice and the node look, and makes the slot the one-shot next boot", async () => {
    const { dir, layout, contents, manifest, stream, options, systemDevice } = setup();
    using _ = dir;
    const writer = await SlotWriter.begin(manifest, options);
    expect(writer.slot).toBe("b");
    await send(writer, stream);
    expect(writer.progress).toEqual({ written: stream.length, total: stream.length, file: "done" });
    await writer.finish();
    const b = layout.esp.slot("b");
    expect(readFileSync(b.kernel).equals(contents.kernel)).toBe(true);
    expect(readFileSync(b.initramfs).equals(contents.initramfs)).toBe(true);
    expect(readFileSync(b.cmdline, "utf8")).toBe(Buffer.from(contents.cmdline).toString());
    expect(readFileSync(b.version, "utf8")).toBe("0.2.0\n");
    expect(readFileSync(systemDevice).subarray(0, contents.system.length).equals(contents.system)).toBe(true);
    expect(readBootRecord(layout)).toEqual({ active: "a", next: "b" });
    expect(readFileSync(layout.esp.slot("a").kernel, "utf8")).toBe("slot a");
    for (const name of ["kernel", "initramfs", "version", "cmdline"] as const) expect(existsSync(`${b[name]}.tmp`)).toBe(false);
  });

  test("copies what the booted slot holds as well instead of receiving it, and checks every copied byte", async () => {
    const { dir, layout, contents, manifest, options, systemDevice, bootedSystemDevice } = setup();
    using _ = dir;
    // Slot a runs the same system image (its partition is larger than the image) and the same kernel.
    const booted = readFileSync(bootedSystemDevice);
    booted.set(contents.system);
    writeFileSync(bootedSystemDevice, booted);
    writeFileSync(layout.esp.slot("a").kernel, contents.kernel);
    const writer = await SlotWriter.begin(manifest, options);
    const steps: string[] = [];
    for await (const step of writer.takeFromBootedSlot()) steps.push(step);
    expect(steps.at(-1)).toBe("done");
    expect(writer.taken).toEqual(["system", "kernel"]);
    expect(writer.toReceive).toEqual(["initramfs", "version", "cmdline"]);
    expect(writer.progress.written).toBe(contents.system.length + contents.kernel.length);
    await send(writer, Buffer.concat(writer.toReceive.map((name) => contents[name])));
    await writer.finish();
    const b = layout.esp.slot("b");
    expect(readFileSync(b.kernel).equals(contents.kernel)).toBe(true);
    expect(readFileSync(b.initramfs).equals(contents.initramfs)).toBe(true);
    expect(readFileSync(systemDevice).subarray(0, contents.system.length).equals(contents.system)).toBe(true);
    expect(readBootRecord(layout)).toEqual({ active: "a", next: "b" });
  });

  /** The initramfs of setup() replaced by one of 3.5 MiB whose chunks the manifest lists; slot a's copy shares its first `alike` bytes, then differs (and is longer). */
  function chunkedInitramfs(alike: number) {
    const context = setup();
    const initramfs = crypto.getRandomValues(new Uint8Array(65_536 * 56));
    const chunks: string[] = [];
    for (let at = 0; at < initramfs.length; at += BUNDLE_CHUNK_BYTES) chunks.push(sha256(initramfs.subarray(at, at + BUNDLE_CHUNK_BYTES)));
    context.contents.initramfs = initramfs;
    context.manifest.files.initramfs = { bytes: initramfs.length, sha256: sha256(initramfs), chunks };
    const booted = new Uint8Array(initramfs.length + 100_000).fill(0x5a);
    booted.set(initramfs.subarray(0, alike));
    writeFileSync(context.layout.esp.slot("a").initramfs, booted);
    return context;
  }

  test("of a chunked file, copies the chunks the booted slot has alike at the same places, and receives the file from the first that differs", async () => {
    const { dir, layout, contents, manifest, options } = chunkedInitramfs(2 * BUNDLE_CHUNK_BYTES + 4096);
    using _ = dir;
    const writer = await SlotWriter.begin(manifest, options);
    for await (const _step of writer.takeFromBootedSlot());
    expect(writer.taken).toEqual([]);
    expect(writer.toReceive).toEqual([...BUNDLE_FILES]);
    // Two whole chunks alike; the third differs after 4096 bytes, so it travels whole.
    expect(writer.receiveFrom("initramfs")).toBe(2 * BUNDLE_CHUNK_BYTES);
    expect(writer.receiveFrom("kernel")).toBe(0);
    expect(writer.progress.written).toBe(2 * BUNDLE_CHUNK_BYTES);
    await send(writer, Buffer.concat(BUNDLE_FILES.map((name) => contents[name].subarray(writer.receiveFrom(name)))));
    expect(writer.progress).toEqual({ written: writer.total, total: writer.total, file: "done" });
    await writer.finish();
    expect(readFileSync(layout.esp.slot("b").initramfs).equals(contents.initramfs)).toBe(true);
  });

  test("of a chunked file, a tail that does not complete the file's sha256 is refused", async () => {
    const { dir, layout, contents, manifest, options } = chunkedInitramfs(BUNDLE_CHUNK_BYTES);
    using _ = dir;
    const writer = await SlotWriter.begin(manifest, options);
    for await (const _step of writer.takeFromBootedSlot());
    expect(writer.receiveFrom("initramfs")).toBe(BUNDLE_CHUNK_BYTES);
    const tail = Buffer.from(contents.initramfs.subarray(BUNDLE_CHUNK_BYTES));
    tail[tail.length - 1]! ^= 0x01;
    await expect(send(writer, Buffer.concat([contents.system, contents.kernel, tail, contents.version, contents.cmdline]))).rejects.toThrow("the bundle's initramfs does not match its sha256");
    await writer.abort();
    expect(existsSync(layout.esp.slot("b").cmdline)).toBe(false);
    expect(existsSync(`${layout.esp.slot("b").initramfs}.tmp`)).toBe(false);
  });

  test("of a chunked file, a booted copy alike to the last byte is taken whole, and one alike in nothing is received whole", async () => {
    for (const [alike, taken] of [
      [65_536 * 56, true],
      [0, false],
    ] as const) {
      const { dir, layout, contents, manifest, options } = chunkedInitramfs(alike);
      using _ = dir;
      // The booted copy is exactly the file when all of it is alike.
      if (taken) writeFileSync(layout.esp.slot("a").initramfs, contents.initramfs);
      const writer = await SlotWriter.begin(manifest, options);
      for await (const _step of writer.takeFromBootedSlot());
      expect(writer.taken.includes("initramfs")).toBe(taken);
      expect(writer.receiveFrom("initramfs")).toBe(0);
      await send(writer, Buffer.concat(writer.toReceive.map((name) => contents[name])));
      await writer.finish();
      expect(readFileSync(layout.esp.slot("b").initramfs).equals(contents.initramfs)).toBe(true);
    }
  });

  test("receives a file whose copy in the booted slot has the right size but other bytes, over the copy", async () => {
    const { dir, layout, contents, manifest, options, systemDevice, bootedSystemDevice } = setup();
    using _ = dir;
    const booted = readFileSync(bootedSystemDevice);
    booted.set(contents.system);
    booted[1234]! ^= 0x01; // one bit off: slot a's partition was damaged, or holds another image
    writeFileSync(bootedSystemDevice, booted);
    writeFileSync(layout.esp.slot("a").kernel, Buffer.from(contents.kernel).reverse());
    const writer = await SlotWriter.begin(manifest, options);
    for await (const _step of writer.takeFromBootedSlot());
    expect(writer.taken).toEqual([]);
    expect(writer.toReceive).toEqual([...BUNDLE_FILES]);
    expect(writer.progress.written).toBe(0);
    await send(writer, Buffer.concat(BUNDLE_FILES.map((name) => contents[name])));
    await writer.finish();
    expect(readFileSync(systemDevice).subarray(0, contents.system.length).equals(contents.system)).toBe(true);
    expect(readFileSync(layout.esp.slot("b").kernel).equals(contents.kernel)).toBe(true);
  });

  test("takes from the booted slot only before the stream, once", async () => {
    const { dir, stream, manifest, options } = setup();
    using _ = dir;
    const writer = await SlotWriter.begin(manifest, options);
    await writer.write(stream.subarray(0, 10));
    await expect(writer.takeFromBootedSlot().next()).rejects.toThrow("the booted slot's files are taken before the stream, once");
    await writer.abort();
  });

  test("refuses a bundle with one changed byte the moment that file is complete, and leaves the slot unbootable", async () => {
    const { dir, layout, manifest, stream, options } = setup();
    using _ = dir;
    const bad = Buffer.from(stream);
    bad[manifest.files.system.bytes + 10]! ^= 0xff; // in the kernel
    const writer = await SlotWriter.begin(manifest, options);
    await expect(send(writer, bad)).rejects.toThrow(/the bundle's kernel does not match its sha256 .*: it was changed or damaged/);
    await writer.abort();
    expect(existsSync(layout.esp.slot("b").cmdline)).toBe(false);
    // Nothing half arrived is left on the ESP.
    expect(readdirSync(layout.esp.slot("b").dir)).toEqual([]);
    expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
  });

  test("refuses a truncated bundle at its end", async () => {
    const { dir, layout, manifest, stream, options } = setup();
    using _ = dir;
    const writer = await SlotWriter.begin(manifest, options);
    await send(writer, stream.subarray(0, stream.length - 3));
    await expect(writer.finish()).rejects.toThrow(`the bundle ended after ${stream.length - 3} of ${stream.length} bytes (in its cmdline): it is truncated`);
    await writer.abort();
    expect(existsSync(layout.esp.slot("b").cmdline)).toBe(false);
    expect(readBootRecord(layout).next).toBeUndefined();
  });

  test("refuses bytes beyond what the description lists", async () => {
    const { dir, manifest, stream, options } = setup();
    using _ = dir;
    const writer = await SlotWriter.begin(manifest, options);
    await expect(writer.write(Buffer.concat([stream, Buffer.from("x")]))).rejects.toThrow(/sent more than the \d+ bytes its description lists/);
    await writer.abort();
  });

  test("a second try after an interrupted one installs cleanly", async () => {
    const { dir, layout, contents, manifest, stream, options } = setup();
    using _ = dir;
    const first = await SlotWriter.begin(manifest, options);
    await first.write(stream.subarray(0, 100_000));
    await first.abort();
    // What a power cut in the middle leaves: files half arrived, half a system image.
    mkdirSync(layout.esp.slot("b").dir, { recursive: true });
    writeFileSync(`${layout.esp.slot("b").kernel}.tmp`, "half");
    writeFileSync(`${layout.esp.slot("b").initramfs}.tmp`, "half");
    const second = await SlotWriter.begin(manifest, options);
    await send(second, stream);
    await second.finish();
    expect(readFileSync(layout.esp.slot("b").kernel).equals(contents.kernel)).toBe(true);
    expect(readBootRecord(layout).next).toBe("b");
  });

  describe("refuses before anything is written", () => {
    test.each([
      ["another architecture", (m: BundleManifest) => ({ ...m, arch: "riscv64" }), {}, /the bundle is for riscv64; this node runs/],
      ["an older version", (m: BundleManifest) => ({ ...m, version: "0.0.9" }), {}, /the bundle's version 0\.0\.9 is older than this node's 0\.1\.0 \(allow a downgrade to install it\)/],
      [
        "a system larger than the partition",
        (m: BundleManifest) => ({ ...m, files: { ...m.files, system: { ...m.files.system, bytes: SYSTEM_PARTITION_BYTES + 1 } } }),
        {},
        /partition SYSTEM-B holds 1048576/,
      ],
      ["an update during an unconfirmed trial", (m: BundleManifest) => m, { booted: "b", trial: true }, /runs slot b as an unconfirmed trial; slot a is its way back/],
    ] as const)("%s", async (_, change, overrides, why) => {
      const { dir, layout, manifest, options } = setup();
      using _dir = dir;
      writeFileSync(layout.esp.slot("a").failed, "{}");
      await expect(SlotWriter.begin(change(manifest), { ...options, ...overrides })).rejects.toThrow(why);
      // Untouched: slot a still boots, the record is as it was.
      expect(readFileSync(layout.esp.slot("a").cmdline, "utf8")).toBe("slot a");
      expect(readFileSync(layout.esp.boot, "utf8")).toBe("active=a\n");
      expect(existsSync(dirname(layout.esp.slot("b").cmdline))).toBe(false);
    });

    test("an older version is written when a downgrade is allowed", async () => {
      const { dir, manifest, options } = setup();
      using _ = dir;
      const writer = await SlotWriter.begin({ ...manifest, version: "0.0.9" }, { ...options, allowDowngrade: true });
      expect(writer.slot).toBe("b");
      await writer.abort();
    });
  });
});

const CAN_MOUNT = process.getuid?.() === 0;

describe.skipIf(!CAN_MOUNT)("the ESP, a small file system of its own (a tmpfs: this host has no vfat)", () => {
  /** setup(), with the ESP a tmpfs of `size` holding what slot a and the boot record hold. */
  async function onSmallEsp(size: string, run: (s: ReturnType<typeof setup>) => Promise<void>) {
    const s = setup();
    using _ = s.dir;
    const esp = s.layout.esp.path;
    const saved = join(s.dir.path, "esp-before");
    await runCommand(["cp", "-a", esp, saved]);
    await runCommand(["mount", "-t", "tmpfs", "-o", `size=${size}`, "tmpfs", esp]);
    try {
      await runCommand(["cp", "-a", `${saved}/.`, esp]);
      await run(s);
    } finally {
      await runCommand(["umount", esp]);
    }
  }

  test("an update whose boot files would not fit is refused before anything is written, saying how much room there is", async () => {
    await onSmallEsp("8m", async ({ layout, manifest, options }) => {
      writeFileSync(join(layout.esp.path, "filler"), new Uint8Array(6 << 20));
      await expect(SlotWriter.begin(manifest, options)).rejects.toThrow(/^the slot's boot files need 113 KiB on the ESP, which has .* free of 8\.0 MiB at .* \(0 B more once slot b's old files go\)$/);
      expect(existsSync(layout.esp.slot("b").dir)).toBe(false);
      expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
    });
  });

  test("an update's boot files wait while a scrub holds the ESP full, and arrive whole once it is done", async () => {
    await onSmallEsp("8m", async ({ layout, contents, manifest, stream, options }) => {
      const esp = layout.esp.path;
      const writer = await SlotWriter.begin(manifest, options);
      // The system image is not on the ESP: it goes in first.
      await send(writer, stream.subarray(0, manifest.files.system.bytes));
      // A scrub as scrubFreeSpace runs it: under the ESP's lock, every free byte taken by its filler.
      const filler = join(esp, SCRUB_FILLER);
      let release: () => void = () => {};
      const held = new Promise<void>((resolve) => (release = resolve));
      let filled = false;
      const scrub = exclusively(esp, async () => {
        const chunk = new Uint8Array(64 * 1024);
        const fd = openSync(filler, "w");
        try {
          for (;;) writeSync(fd, chunk);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "ENOSPC") throw err;
        } finally {
          closeSync(fd);
        }
        filled = true;
        await held;
        rmSync(filler);
      });
      await eventually(() => expect(filled).toBe(true));
      // Unlocked, these writes would meet the full ESP now and fail with ENOSPC.
      const writing = send(writer, stream.subarray(manifest.files.system.bytes));
      await Bun.sleep(200);
      release();
      await scrub;
      await writing;
      await writer.finish();
      expect(readFileSync(layout.esp.slot("b").initramfs).equals(contents.initramfs)).toBe(true);
      expect(readBootRecord(layout)).toEqual({ active: "a", next: "b" });
    });
  });
});
