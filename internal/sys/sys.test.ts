import { describe, expect, test } from "bun:test";
import { join } from "node:path";
import { loadOrder, moduleName, parseModulesDep } from "./mod.ts";

const MODULES_DEP = `kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/mbcache.ko kernel/fs/jbd2/jbd2.ko
kernel/lib/crc16.ko:
kernel/fs/mbcache.ko:
kernel/fs/jbd2/jbd2.ko:
kernel/drivers/md/dm-crypt.ko: kernel/drivers/md/dm-mod.ko
kernel/drivers/md/dm-mod.ko:
kernel/drivers/virtio/virtio_pci.ko: kernel/drivers/virtio/virtio_pci_modern_dev.ko kernel/drivers/virtio/virtio_pci_legacy_dev.ko
kernel/drivers/virtio/virtio_pci_modern_dev.ko:
kernel/drivers/virtio/virtio_pci_legacy_dev.ko:
kernel/loop/a.ko: kernel/loop/b.ko
kernel/loop/b.ko: kernel/loop/a.ko
`;

describe("kernel modules", () => {
  const index = parseModulesDep(MODULES_DEP);

  test("module names drop the path and suffix and use underscores", () => {
    expect(moduleName("kernel/drivers/md/dm-crypt.ko")).toBe("dm_crypt");
    expect(moduleName("kernel/fs/ext4/ext4.ko.xz")).toBe("ext4");
  });

  test("every module loads after its dependencies, each once", () => {
    const order = loadOrder(index, ["ext4", "dm-crypt", "virtio_pci", "jbd2"]);
    expect(order).toEqual(["crc16", "mbcache", "jbd2", "ext4", "dm_mod", "dm_crypt", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci"]);
  });

  test("an unknown module is an error naming it and who needed it", () => {
    expect(() => loadOrder(index, ["nonexistent"])).toThrow("module nonexistent is not in modules.dep");
    const broken = parseModulesDep("kernel/x.ko: kernel/missing.ko\n");
    expect(() => loadOrder(broken, ["x"])).toThrow("module missing is not in modules.dep (needed by x)");
  });

  test("a dependency cycle is an error showing the cycle", () => {
    expect(() => loadOrder(index, ["a"])).toThrow("module dependency cycle: a -> b -> a");
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
      const orphanMaker = Bun.spawnSync(["sh", "-c", "sh -c 'exit 0' & echo $!"]);
      const orphan = Number(orphanMaker.stdout.toString().trim());
      let state;
      for (let i = 0; i < 200 && (state = processState(orphan))?.state !== "Z"; i++) await Bun.sleep(10);
      const zombieBefore = state?.state;
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
