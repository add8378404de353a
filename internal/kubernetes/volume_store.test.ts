// The volume store's bookkeeping on a real directory tree. The kernel's
// quotas are a recording stand-in here (test_quotas.ts says why).

import { describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { freeSpace } from "../localstorage/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { recordingQuotas } from "./test_quotas.ts";
import { describeRoom, NoRoomError, VOLUME_RESERVE, VolumeError, VolumeStore } from "./volume_store.ts";

const MiB = 1024 * 1024;

describe("a worker's volumes", () => {
  test("made with a project and a limit, listed, expanded, deleted with their data and their limit", () => {
    using dir = tempDir();
    const quotas = recordingQuotas();
    const store = new VolumeStore(join(dir.path, "volumes"), quotas);
    store.recover();
    const a = store.create("pvc-a", 64 * MiB);
    expect(a).toMatchObject({ name: "pvc-a", path: join(dir.path, "volumes", "pvc-a"), limitBytes: 64 * MiB });
    expect(a.project).toBeGreaterThan(1);
    const b = store.create("pvc-b", 32 * MiB);
    expect(b.project).not.toBe(a.project);
    // Made again (a provisioner that died after making it): the same volume.
    expect(store.create("pvc-a", 64 * MiB).project).toBe(a.project);
    expect(
      store
        .list()
        .map((v) => v.name)
        .sort(),
    ).toEqual(["pvc-a", "pvc-b"]);

    writeFileSync(join(a.path, "data"), "kept");
    expect(store.expand("pvc-a", 128 * MiB).limitBytes).toBe(128 * MiB);
    expect(store.expand("pvc-a", 16 * MiB).limitBytes).toBe(128 * MiB);

    store.delete("pvc-a");
    expect(existsSync(a.path)).toBe(false);
    expect(quotas.limits.has(a.project)).toBe(false);
    expect(readdirSync(store.root)).toEqual(["pvc-b"]);
    store.delete("pvc-a");
  });

  test("room: free space less the reserve and what volumes were promised; a volume that does not fit is refused naming the room", () => {
    using dir = tempDir();
    const store = new VolumeStore(join(dir.path, "volumes"), recordingQuotas());
    store.recover();
    const space = freeSpace(store.root);
    const room = store.room();
    expect(room.reserveBytes).toBe(Math.max(VOLUME_RESERVE.floorBytes, Math.floor(space.totalBytes * VOLUME_RESERVE.share)));
    expect(room.promisedBytes).toBe(0);
    store.create("pvc-a", 8 * MiB);
    const after = store.room();
    expect(after.promisedBytes).toBe(8 * MiB);
    expect(after.availableBytes).toBe(Math.max(0, after.freeBytes - after.reserveBytes - after.promisedBytes));
    const tooBig = after.availableBytes + 64 * MiB;
    expect(() => store.create("pvc-big", tooBig)).toThrow(NoRoomError);
    expect(() => store.create("pvc-big", tooBig)).toThrow(/reserved for the node/);
    expect(existsSync(join(store.root, "pvc-big"))).toBe(false);
    expect(describeRoom(after)).toContain("for new volumes");
  });

  test("an interrupted make or delete is finished at the next start: nothing half-made stays", () => {
    using dir = tempDir();
    const quotas = recordingQuotas();
    const store = new VolumeStore(join(dir.path, "volumes"), quotas);
    store.recover();
    mkdirSync(join(store.root, ".new-pvc-x"));
    quotas.assign(join(store.root, ".new-pvc-x"), 77);
    quotas.setLimit(77, MiB);
    mkdirSync(join(store.root, ".deleting-pvc-y"));
    writeFileSync(join(store.root, ".deleting-pvc-y", "old"), "x");
    expect(store.recover().sort()).toEqual([".deleting-pvc-y", ".new-pvc-x"]);
    expect(readdirSync(store.root)).toEqual([]);
    expect(quotas.limits.has(77)).toBe(false);
  });

  test("names are DNS labels; sizes positive", () => {
    using dir = tempDir();
    const store = new VolumeStore(join(dir.path, "volumes"), recordingQuotas());
    store.recover();
    for (const name of ["../etc", "PVC", ".new-x", "", "a".repeat(64)]) expect(() => store.create(name, MiB)).toThrow(VolumeError);
    expect(() => store.create("pvc-z", 0)).toThrow("a volume of 0 bytes");
    expect(() => store.expand("pvc-none", MiB)).toThrow("no volume pvc-none on this node");
  });
});
