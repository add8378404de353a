// A trial boot: confirmed once the node has rejoined, rolled back when it
// has not within its bound, and, when it ended without either (a crash),
// turned into the slot's failure by the next boot.

import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { storageLayout, type BootSelection, type Slot } from "../localstorage/mod.ts";
import { supervise } from "../supervisor/mod.ts";
import { eventually, tempDir } from "../testing/mod.ts";
import { readBootRecord, readSlotFailure, settleEarlierTrial, trialRunnable, writeSlotFailure } from "./mod.ts";

/** A node that just booted slot b (v2) as a trial, with slot a (v1) active. */
function trialBoot(record = "active=a\n") {
  const dir = tempDir("nodecore-trial-");
  const layout = storageLayout(dir.path);
  for (const [slot, version] of [
    ["a", "0.1.0"],
    ["b", "0.2.0"],
  ] as [Slot, string][]) {
    const files = layout.esp.slot(slot);
    mkdirSync(files.dir, { recursive: true });
    for (const file of [files.kernel, files.initramfs, files.cmdline]) writeFileSync(file, "x");
    writeFileSync(files.version, `${version}\n`);
  }
  writeFileSync(layout.esp.boot, record);
  const selection: BootSelection = { slot: "b", trial: true, system: undefined, systemError: undefined };
  return { dir, layout, selection, trialNote: join(layout.esp.slot("b").dir, "trial") };
}

describe("a trial boot", () => {
  test("becomes the active slot once the node has rejoined, and forgets an old failure of its slot", async () => {
    const { dir, layout, selection, trialNote } = trialBoot();
    using _ = dir;
    writeSlotFailure(layout, { slot: "b", version: "0.1.5", reason: "an older try", timeMs: 1 });
    const rejoined = new Value<true>();
    const reboots: string[] = [];
    const { logger, entries } = captureLogger("root");
    const supervisor = supervise(
      trialRunnable({ layout, selection, version: "0.2.0", rejoined: (signal) => rejoined.get({ signal }).then(() => {}), reboot: (why) => reboots.push(why), boundMs: 60_000 }),
      { logger },
    );
    try {
      await eventually(() => expect(existsSync(trialNote)).toBe(true));
      expect(readBootRecord(layout).active).toBe("a");
      rejoined.set(true);
      await eventually(() => expect(readBootRecord(layout)).toEqual({ active: "b", next: undefined }));
      expect(readSlotFailure(layout, "b")).toBeUndefined();
      expect(existsSync(trialNote)).toBe(false);
      expect(reboots).toEqual([]);
      expect(entries.map((e) => e.message)).toContain("slot b (version 0.2.0) confirmed: the node rejoined its cluster, and slot b is the active slot now");
    } finally {
      await supervisor.stop();
    }
  });

  test("that does not rejoin within its bound notes why and reboots into the active slot", async () => {
    const { dir, layout, selection, trialNote } = trialBoot();
    using _ = dir;
    const reboots: string[] = [];
    const { logger } = captureLogger("root");
    const supervisor = supervise(
      trialRunnable({ layout, selection, version: "0.2.0", rejoined: (signal) => new Value<true>().get({ signal }).then(() => {}), reboot: (why) => reboots.push(why), boundMs: 1_000 }),
      { logger },
    );
    try {
      await eventually(() => expect(reboots).toEqual(["the trial of slot b (version 0.2.0) did not rejoin its cluster within 1 s of booting"]));
      expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
      expect(readSlotFailure(layout, "b")).toMatchObject({ slot: "b", version: "0.2.0", reason: "did not rejoin its cluster within 1 s of booting" });
      expect(existsSync(trialNote)).toBe(false);
    } finally {
      await supervisor.stop();
    }
  });

  test("that ended without a word (a crash) is the slot's failure on the next boot, of the old slot", async () => {
    const { dir, layout, trialNote } = trialBoot();
    using _ = dir;
    writeFileSync(trialNote, JSON.stringify({ version: "0.2.0", sinceMs: 5 }));
    expect(await settleEarlierTrial(layout, "a", 42)).toEqual({ slot: "b", settled: true });
    expect(readSlotFailure(layout, "b")).toEqual({
      slot: "b",
      version: "0.2.0",
      reason: "its trial boot ended before the node rejoined its cluster (a crash, a hang or a power cut); the node came back on slot a",
      timeMs: 42,
    });
    expect(existsSync(trialNote)).toBe(false);
    expect(await settleEarlierTrial(layout, "a")).toEqual({ slot: "b", settled: false });
  });

  test("is not what an ordinary boot of the active slot runs", async () => {
    const { dir, layout } = trialBoot("active=b\n");
    using _ = dir;
    const { logger } = captureLogger("root");
    const reboots: string[] = [];
    const supervisor = supervise(
      trialRunnable({
        layout,
        selection: { slot: "b", trial: false, system: undefined, systemError: undefined },
        version: "0.2.0",
        rejoined: () => new Promise(() => {}),
        reboot: (why) => reboots.push(why),
        boundMs: 100,
      }),
      { logger },
    );
    try {
      // Done, not waiting: nothing of a trial is left to happen.
      await eventually(() => expect(supervisor.dump().find((r) => r.path === "root")?.state).toBe("done"));
      expect(reboots).toEqual([]);
      expect(readBootRecord(layout)).toEqual({ active: "b", next: undefined });
    } finally {
      await supervisor.stop();
    }
  });
});
