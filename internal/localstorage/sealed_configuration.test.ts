import { describe, expect, test } from "bun:test";
import { mkdirSync, statSync, writeFileSync } from "node:fs";
import { create, equals } from "@bufbuild/protobuf";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import { Value } from "../event/mod.ts";
import { tempDir, testCA } from "../testing/mod.ts";
import { readSealedConfiguration, SealedConfigurationError, storageLayout, updateSealedConfiguration, writeSealedConfiguration } from "./mod.ts";

const ca = testCA().certificate;

describe("readSealedConfiguration", () => {
  test("a missing file is undefined: the node has not enrolled", () => {
    using dir = tempDir();
    expect(readSealedConfiguration(storageLayout(dir.path).esp.sealed)).toBeUndefined();
  });

  test("a corrupt file is a SealedConfigurationError that refuses to start over", () => {
    using dir = tempDir();
    const { esp } = storageLayout(dir.path);
    mkdirSync(esp.path + "/nodecore", { recursive: true });
    writeFileSync(esp.sealed, new Uint8Array([9, 9, 9]));
    expect(() => readSealedConfiguration(esp.sealed)).toThrow(SealedConfigurationError);
    expect(() => readSealedConfiguration(esp.sealed)).toThrow("refusing to start over");
  });

  test("a file that cannot be read (a directory here; EIO on a damaged ESP) is an error naming the file", () => {
    using dir = tempDir();
    const { esp } = storageLayout(dir.path);
    mkdirSync(esp.sealed, { recursive: true });
    expect(() => readSealedConfiguration(esp.sealed)).toThrow(`sealed configuration at ${esp.sealed} could not be read (`);
  });
});

describe("updateSealedConfiguration", () => {
  test("concurrent updates each land, an update that changes nothing neither writes nor publishes, and a missing file is undefined", async () => {
    using dir = tempDir();
    const layout = storageLayout(dir.path);
    const published = new Value<SealedConfiguration>();
    expect(await updateSealedConfiguration(layout.esp, published, () => {})).toBeUndefined();
    writeSealedConfiguration(layout.esp.sealed, create(SealedConfigurationSchema, { nodeUnlockKey: new Uint8Array(32), joinKey: new Uint8Array(32), clusterCa: new Uint8Array(ca.raw) }));
    // Two workers at once: the second reads what the first wrote.
    await Promise.all([
      updateSealedConfiguration(layout.esp, published, (s) => void (s.joinCertificate = new Uint8Array([1, 2, 3]))),
      updateSealedConfiguration(layout.esp, published, (s) => void (s.coldStartClusterUnlockKey = new Uint8Array(32).fill(9))),
    ]);
    const stored = readSealedConfiguration(layout.esp.sealed)!;
    expect([...stored.joinCertificate]).toEqual([1, 2, 3]);
    expect(stored.coldStartClusterUnlockKey.length).toBe(32);
    expect(equals(SealedConfigurationSchema, published.peek()!, stored)).toBe(true);
    const before = statSync(layout.esp.sealed).mtimeMs;
    const marker = new Value<SealedConfiguration>();
    const unchanged = await updateSealedConfiguration(layout.esp, marker, () => {});
    expect(equals(SealedConfigurationSchema, unchanged!.previous, unchanged!.next)).toBe(true);
    expect(marker.peek()).toBeUndefined();
    expect(statSync(layout.esp.sealed).mtimeMs).toBe(before);
  });
});
