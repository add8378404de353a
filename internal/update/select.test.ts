// PID 1's slot choice against ESP trees: which slot boots, when the record's
// one-shot next is cleared, when the running build goes on without a kexec,
// and where a slot that cannot be loaded sends the node.

import { describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { storageLayout, type Slot } from "../localstorage/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { chooseBootSlot, readBootRecord, type SlotLoader } from "./mod.ts";

const HASH = "ab".repeat(32);
const SYSTEM = `nodecore.system=733,3002368,${HASH}`;
const BASE = "console=ttyS0 panic=-1";

/** The command line of a slot holding build `build`. */
function cmdline(build: string): string {
  return `${BASE} ${SYSTEM} nodecore.build=${build}`;
}

/** A node root whose ESP holds these slots (by build) and this record. */
function node(slots: Partial<Record<Slot, string>>, record?: string) {
  const dir = tempDir("nodecore-select-");
  const layout = storageLayout(dir.path);
  mkdirSync(dirname(layout.esp.boot), { recursive: true });
  for (const [slot, build] of Object.entries(slots) as [Slot, string][]) {
    const files = layout.esp.slot(slot);
    mkdirSync(files.dir, { recursive: true });
    writeFileSync(files.kernel, `kernel ${build}`);
    writeFileSync(files.initramfs, `initramfs ${build}`);
    writeFileSync(files.cmdline, `${cmdline(build)}\n`);
    writeFileSync(files.version, `v-${build}\n`);
  }
  if (record !== undefined) writeFileSync(layout.esp.boot, record);
  return { dir, layout };
}

/** A loader that records what it was handed, or fails for the kernels named. */
function loader(failFor: string[] = []) {
  const loads: { kernel: string; cmdline: string }[] = [];
  const load: SlotLoader = (kernel, initramfs, line) => {
    const text = readFileSync(kernel, "utf8");
    readFileSync(initramfs);
    if (failFor.includes(text)) throw new Error("kexec_file_load: EINVAL");
    loads.push({ kernel: text, cmdline: line });
  };
  return { load, loads };
}

describe("the slot choice", () => {
  test("goes on with the running build when the active slot holds it: no kexec", () => {
    const { dir, layout } = node({ a: "one" }, "active=a\n");
    using _ = dir;
    const { load, loads } = loader();
    const choice = chooseBootSlot(layout, cmdline("one"), load);
    expect(choice).toMatchObject({ kind: "this", version: "v-one", selection: { slot: "a", trial: false, system: { rootHash: HASH } } });
    expect(loads).toEqual([]);
  });

  test("kexecs the active slot when it holds another build, naming the slot on its command line", () => {
    const { dir, layout } = node({ a: "one", b: "two" }, "active=b\n");
    using _ = dir;
    const { load, loads } = loader();
    expect(chooseBootSlot(layout, cmdline("one"), load)).toEqual({ kind: "loaded", slot: "b", trial: false, version: "v-two" });
    expect(loads).toEqual([{ kernel: "kernel two", cmdline: `${cmdline("two")} nodecore.slot=b` }]);
  });

  test("boots a one-shot next once, as a trial, clearing it first", () => {
    const { dir, layout } = node({ a: "one", b: "two" }, "active=a\nnext=b\n");
    using _ = dir;
    const { load, loads } = loader();
    expect(chooseBootSlot(layout, cmdline("one"), load)).toMatchObject({ kind: "loaded", slot: "b", trial: true });
    expect(loads[0]!.cmdline).toEndWith("nodecore.slot=b nodecore.trial=1");
    expect(readBootRecord(layout)).toEqual({ active: "a", next: undefined });
    // The next boot (the trial crashed, or was powered off) is the active slot's.
    expect(chooseBootSlot(layout, cmdline("one"), loader().load)).toMatchObject({ kind: "this", selection: { slot: "a", trial: false } });
  });

  test("a trial of the running build goes on without a kexec, still as a trial", () => {
    const { dir, layout } = node({ a: "two", b: "one" }, "active=b\nnext=a\n");
    using _ = dir;
    expect(chooseBootSlot(layout, cmdline("two"), loader().load)).toMatchObject({ kind: "this", selection: { slot: "a", trial: true } });
  });

  test("without a build on the running command line, always kexecs: nothing proves the firmware booted the slot", () => {
    const { dir, layout } = node({ a: "one" });
    using _ = dir;
    const { load, loads } = loader();
    expect(chooseBootSlot(layout, `${BASE} ${SYSTEM}`, load)).toMatchObject({ kind: "loaded", slot: "a" });
    expect(loads).toHaveLength(1);
  });

  test("a slot that cannot be loaded hands the boot to the other slot, never as a trial", () => {
    const { dir, layout } = node({ a: "one", b: "two" }, "active=a\nnext=b\n");
    using _ = dir;
    const choice = chooseBootSlot(layout, cmdline("one"), loader(["kernel two"]).load);
    expect(choice).toMatchObject({ kind: "this", selection: { slot: "a", trial: false } });
    expect(choice.kind === "this" ? choice.note : "").toContain("slot b (version v-two) cannot boot: kexec_file_load: EINVAL; trying slot a");
  });

  test("halts, saying why, when neither slot can boot", () => {
    const { dir, layout } = node({ b: "two" }, "active=b\n");
    using _ = dir;
    const choice = chooseBootSlot(layout, cmdline("one"), loader(["kernel two"]).load);
    expect(choice.kind).toBe("halt");
    expect(choice.kind === "halt" ? choice.why : "").toMatch(/^slot b \(version v-two\) cannot boot: kexec_file_load: EINVAL, and slot a \(version unknown\) cannot boot: its command line: ENOENT/);
  });
});
