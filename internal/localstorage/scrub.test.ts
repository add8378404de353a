// The ESP scrub on a small file system of its own (as root), and the ESP
// lock that keeps other writers from meeting its ENOSPC.

import { describe, expect, test } from "bun:test";
import { mkdirSync, readdirSync, readFileSync, statfsSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { runCommand } from "../supervisor/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { exclusively, scrubFreeSpace, writeFileDurably } from "./mod.ts";

const CAN_MOUNT = process.getuid?.() === 0;

describe("exclusively", () => {
  test("runs the calls for one file system one at a time, in call order; a failed call does not stop the next", async () => {
    const events: string[] = [];
    const slow = (name: string, ms: number) => async () => {
      events.push(`${name} start`);
      await Bun.sleep(ms);
      events.push(`${name} end`);
      return name;
    };
    const a = exclusively("/fs-a", slow("a1", 30));
    const failing = exclusively("/fs-a", () => {
      events.push("a2 runs");
      throw new Error("a2 failed");
    });
    const third = exclusively("/fs-a", slow("a3", 1));
    const other = exclusively("/fs-b", slow("b1", 1));
    expect(await a).toBe("a1");
    let failure = "";
    try {
      await failing;
    } catch (err) {
      failure = (err as Error).message;
    }
    expect(failure).toBe("a2 failed");
    expect(await third).toBe("a3");
    expect(await other).toBe("b1");
    const ordered = events.filter((e) => e.startsWith("a"));
    expect(ordered).toEqual(["a1 start", "a1 end", "a2 runs", "a3 start", "a3 end"]);
    // Another file system's call did not wait for a1.
    expect(events.indexOf("b1 end")).toBeLessThan(events.indexOf("a1 end"));
  });
});

describe.skipIf(!CAN_MOUNT)("scrubFreeSpace on a small file system of its own", () => {
  // This host's kernel has no vfat and loads no modules, so the file system
  // is a tmpfs of 8 MiB: what is tested here is the fill, the flushes, the
  // filler's removal and the lock. That no old cluster of the key is left
  // on a real FAT ESP is checked on a VM's disk by the qemu e2e (node2's disk
  // read on the host).
  test("fills the free space, removes the filler, leaves the files intact, and a write queued behind it finds the space free again", async () => {
    using dir = tempDir("nodecore-scrub-");
    const mountPoint = join(dir.path, "esp");
    mkdirSync(mountPoint);
    await runCommand(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", mountPoint]);
    try {
      await scrubAndCheck(mountPoint);
    } finally {
      await runCommand(["umount", mountPoint]);
    }
  });
});

/** Scrubs `mountPoint` with a write queued behind the scrub, and checks both. */
async function scrubAndCheck(mountPoint: string): Promise<void> {
  const sealed = join(mountPoint, "sealed.pb");
  writeFileDurably(sealed, "sealed configuration");
  const before = statfsSync(mountPoint);

  const scrubbing = scrubFreeSpace(mountPoint);
  // Called while the scrub runs, it waits for the filler to be gone: without the lock it would meet a full file system.
  const queued = exclusively(mountPoint, () => {
    const free = statfsSync(mountPoint);
    writeFileSync(join(mountPoint, "held_shares.pb"), Buffer.alloc(64 * 1024, 1));
    return { filler: readdirSync(mountPoint).includes(".scrub"), freeBytes: free.bavail * free.bsize };
  });
  const written = await scrubbing;
  const seenByWriter = await queued;

  // Every free block was written (tmpfs rounds to pages).
  expect(written).toBeGreaterThanOrEqual(before.bavail * before.bsize - 4096);
  expect(seenByWriter.filler).toBe(false);
  expect(seenByWriter.freeBytes).toBeGreaterThanOrEqual(before.bavail * before.bsize - 4096);
  expect(readdirSync(mountPoint).sort()).toEqual(["held_shares.pb", "sealed.pb"]);
  expect(readFileSync(sealed, "utf8")).toBe("sealed configuration");
  expect(readFileSync(join(mountPoint, "held_shares.pb")).length).toBe(64 * 1024);
}
