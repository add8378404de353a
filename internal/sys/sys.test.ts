import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { writeFileSync } from "node:fs";
import { tempDir } from "../testing/mod.ts";
import { cpuFlags, loadModules, parseLoadList } from "./mod.ts";

describe("kernel modules", () => {
  test("the load list keeps its order, skips blanks and comments, and reads each module's CPU flags", () => {
    expect(parseLoadList("# built by image/modules.ts\nkernel/a.ko\n\n  kernel/b.ko  cpu=aes,sse4_2\n")).toEqual([
      { path: "kernel/a.ko", cpu: [] },
      { path: "kernel/b.ko", cpu: ["aes", "sse4_2"] },
    ]);
    expect(() => parseLoadList("kernel/b.ko always\n")).toThrow('the load list\'s line for kernel/b.ko has "always", which is no cpu=<flags> condition');
  });

  test("a module whose CPU flags are missing is skipped, saying which; one that needs none is not", () => {
    using dir = tempDir();
    writeFileSync(join(dir.path, "modules.load"), "kernel/aesni-intel.ko cpu=aes\nkernel/crc32c-intel.ko cpu=sse4_2\n");
    // Neither file exists: a module that were tried would be an error.
    expect(loadModules(dir.path, "modules.load", { cpuFlags: new Set(["fpu", "sse2"]) })).toEqual({
      loaded: [],
      skipped: [
        { path: "kernel/aesni-intel.ko", reason: "the CPU lacks aes" },
        { path: "kernel/crc32c-intel.ko", reason: "the CPU lacks sse4_2" },
      ],
    });
    expect(() => loadModules(dir.path, "modules.load", { cpuFlags: new Set(["aes"]) })).toThrow("module kernel/aesni-intel.ko is in modules.load but missing from the image");
  });

  test("the CPU's flags are read from /proc/cpuinfo's first flags line", () => {
    expect(cpuFlags("processor\t: 0\nflags\t\t: fpu vme aes sse4_2\nbugs\t: \nflags\t\t: other\n")).toEqual(new Set(["fpu", "vme", "aes", "sse4_2"]));
    expect(cpuFlags("processor: 0\n").size).toBe(0);
  });

  test("a missing list or module is an error naming it", () => {
    using dir = tempDir();
    expect(() => loadModules(dir.path, "modules.load")).toThrow(`no module list at ${dir.path}/modules.load`);
    writeFileSync(join(dir.path, "modules.load"), "kernel/missing.ko\n");
    expect(() => loadModules(dir.path, "modules.load")).toThrow("module kernel/missing.ko is in modules.load but missing from the image");
  });
});

describe("reaper", () => {
  test("reaps orphaned zombies but not the process's own children", async () => {
    // A subprocess becomes a subreaper (as PID 1 is), orphans a grandchild and
    // reports what the reaper did.
    const script = `
      import { becomeSubreaper, reapOrphans, processState } from ${JSON.stringify(join(import.meta.dir, "mod.ts"))};
      becomeSubreaper();
      const own = Bun.spawn(["sh", "-c", "exit 0"]);
      // The orphan ends a while after its parent: a zombie that appears
      // while Bun.spawnSync still waits for its own child can be reaped by
      // that wait (seen with the test files in parallel), and then this
      // test could not tell the reaper's work from Bun's.
      // Its output goes nowhere: holding spawnSync's pipe, it would keep
      // spawnSync waiting until it ended.
      const orphanMaker = Bun.spawnSync(["sh", "-c", "sh -c 'sleep 0.3; exit 0' >/dev/null 2>&1 & echo $!"]);
      const orphan = Number(orphanMaker.stdout.toString().trim());
      // Polled with a deadline, not a count: with test files in parallel on
      // two cores the orphan's sh took over 2 s to exit.
      let state;
      for (const deadline = Date.now() + 15_000; Date.now() < deadline && (state = processState(orphan))?.state !== "Z"; ) await Bun.sleep(10);
      const zombieBefore = state?.state ?? "gone";
      await Bun.sleep(50);
      const reaped = reapOrphans((pid) => pid === own.pid);
      const ownExit = await own.exited;
      console.log(JSON.stringify({ orphan, zombieBefore, reaped, goneAfter: processState(orphan) === undefined, ownExit }));
    `;
    const result = Bun.spawnSync([process.execPath, "-e", script], { stderr: "pipe" });
    expect(result.stderr.toString()).toBe("");
    const report = JSON.parse(result.stdout.toString());
    expect(report.zombieBefore).toBe("Z");
    expect(report.reaped).toEqual([report.orphan]);
    expect(report.goneAfter).toBe(true);
    expect(report.ownExit).toBe(0);
  });
});
