// The previous boots' logs on disk: written, moved back a place at each
// boot, an unclean end named, damaged lines skipped, and the size bound.

import { describe, expect, test } from "bun:test";
import { appendFileSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { BOOTS_KEPT, MAX_BYTES, PER_PATH, persistBoot, readBoot, rotateBoots, uncleanCause } from "./boots.ts";
import { LogTree } from "./log_tree.ts";

function treeWith(lines: [string, string][]): LogTree {
  const tree = new LogTree();
  let t = 1_800_000_000_000;
  for (const [path, message] of lines) tree.append({ time: new Date(t++), level: "info", path, message, fields: { n: 1 } });
  return tree;
}

describe("boot logs", () => {
  test("a boot that ended cleanly is read back whole, with its end; the next boot moves it to boot 1", () => {
    using dir = tempDir("nodecore-boots-");
    const tree = treeWith([
      ["root.a", "first"],
      ["root.b", "second"],
      ["kernel", "third"],
    ]);
    expect(rotateBoots(dir.path)).toBeUndefined();
    persistBoot(dir.path, tree, { bootMs: 1_000, version: "0.1.0" });
    persistBoot(dir.path, tree, { bootMs: 1_000, version: "0.1.0", end: { timeMs: 2_000, cause: "reboot: owner asked through NodeManagement.Reboot" } });
    const previous = rotateBoots(dir.path, () => "unused");
    expect(previous).toEqual({ bootMs: 1_000, version: "0.1.0", end: { timeMs: 2_000, cause: "reboot: owner asked through NodeManagement.Reboot" } });
    const kept = readBoot(dir.path, 1)!;
    expect(kept.entries.map((e) => `${e.path} ${e.message} ${e.fields.join(";")}`)).toEqual(["root.a first n,1", "root.b second n,1", "kernel third n,1"]);
    expect(kept.skipped).toBe(0);
    expect(readBoot(dir.path, 0)).toBeUndefined();
  });

  test("a boot that never wrote its end is given one at the next boot: unclean, from its last entry's time", () => {
    using dir = tempDir("nodecore-boots-");
    persistBoot(dir.path, treeWith([["root.a", "last words"]]), { bootMs: 1_000, version: "v" });
    const previous = rotateBoots(dir.path, () => uncleanCause(join(dir.path, "no-pstore")));
    expect(previous?.end).toEqual({ timeMs: 1_800_000_000_000, cause: "no clean end was recorded: power loss, a kernel panic, or a reset" });
    expect(readBoot(dir.path, 1)!.header.end?.cause).toStartWith("no clean end was recorded");
    // With pstore records, they are named.
    const pstore = join(dir.path, "pstore");
    mkdirSync(pstore);
    appendFileSync(join(pstore, "dmesg-ramoops-0"), "panic");
    expect(uncleanCause(pstore)).toBe("no clean end was recorded; pstore holds 1 record(s) of a crash (dmesg-ramoops-0)");
  });

  test(`only ${BOOTS_KEPT} boots are kept: the oldest goes`, () => {
    using dir = tempDir("nodecore-boots-");
    for (let boot = 1; boot <= BOOTS_KEPT + 2; boot++) {
      rotateBoots(dir.path);
      persistBoot(dir.path, treeWith([["root", `boot ${boot}`]]), { bootMs: boot, version: "v", end: { timeMs: boot, cause: "poweroff: test" } });
    }
    rotateBoots(dir.path);
    const kept = [1, 2, 3].map((age) => readBoot(dir.path, age)?.entries[0]?.message);
    expect(kept).toEqual([`boot ${BOOTS_KEPT + 2}`, `boot ${BOOTS_KEPT + 1}`, undefined]);
  });

  test("a damaged line is skipped and counted, never fatal; a damaged header leaves the entries readable", () => {
    using dir = tempDir("nodecore-boots-");
    persistBoot(
      dir.path,
      treeWith([
        ["root.a", "one"],
        ["root.a", "two"],
      ]),
      { bootMs: 1_000, version: "v" },
    );
    const file = join(dir.path, "boot-0.ndjson");
    appendFileSync(file, '{"t": "not a time"}\n\u0000\u0001garbage\n{"t":5,"l":"info","p":"root","m":"three","f":[]}\n');
    const read = readBoot(dir.path, 0)!;
    expect(read.entries.map((e) => e.message)).toEqual(["one", "two", "three"]);
    expect(read.skipped).toBe(2);
    const broken = readFileSync(file, "utf8").replace('{"header"', '{"heaxer"');
    writeFileSync(file, broken);
    expect(readBoot(dir.path, 0)!.entries.map((e) => e.message)).toEqual(["one", "two", "three"]);
  });

  test(`each ring gives its newest ${PER_PATH} entries, and the file stays within ${MAX_BYTES} bytes`, () => {
    using dir = tempDir("nodecore-boots-");
    const tree = new LogTree();
    for (let i = 0; i < PER_PATH + 50; i++) tree.append({ time: new Date(i), level: "info", path: "root.chatty", message: `line ${i}` });
    tree.append({ time: new Date(10_000), level: "warn", path: "root.quiet", message: "once" });
    persistBoot(dir.path, tree, { bootMs: 1, version: "v" });
    const read = readBoot(dir.path, 0)!;
    expect(read.entries.filter((e) => e.path === "root.chatty").length).toBe(PER_PATH);
    expect(read.entries.at(-1)!.message).toBe("once");
    expect(read.entries.find((e) => e.path === "root.chatty")!.message).toBe("line 50");

    // Long lines in many rings: the newest stay, within the bound.
    const big = new LogTree();
    for (let r = 0; r < 40; r++) for (let i = 0; i < 100; i++) big.append({ time: new Date(r * 1000 + i), level: "info", path: `root.r${r}`, message: "x".repeat(1_900) });
    persistBoot(dir.path, big, { bootMs: 1, version: "v" });
    expect(statSync(join(dir.path, "boot-0.ndjson")).size).toBeLessThanOrEqual(MAX_BYTES + 200);
    expect(readBoot(dir.path, 0)!.entries.at(-1)!.path).toBe("root.r39");
    expect(existsSync(join(dir.path, "boot-0.ndjson.tmp"))).toBe(false);
  });
});
