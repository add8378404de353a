// `ctl cluster manifests apply`'s reading of files (manifests.ts): YAML
// documents and JSON, Lists opened, a folder's files one manifest each,
// and every mistake named in one line with its file before any call.

import { afterAll, describe, expect, test } from "bun:test";
import { mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { tempDir } from "../testing/mod.ts";
import { UsageError } from "./cli_table.ts";
import { manifestFile, manifestFiles } from "./manifests.ts";

const dir = tempDir("ctl-manifests-");
afterAll(() => dir[Symbol.dispose]());

const write = (name: string, text: string) => {
  const path = join(dir.path, name);
  writeFileSync(path, text);
  return path;
};

async function refused(promise: Promise<unknown>): Promise<string> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(UsageError);
    expect((error as Error).message).not.toContain("\n");
    return (error as Error).message;
  }
  throw new Error("not refused");
}

describe("ctl cluster manifests apply", () => {
  test("a YAML file's documents are its objects (empty ones skipped, a List opened); the name is the file's", async () => {
    const path = write(
      "web-app.yaml",
      [
        "apiVersion: v1",
        "kind: Namespace",
        "metadata: {name: web}",
        "---",
        "---",
        "apiVersion: v1",
        "kind: List",
        "items:",
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: a, namespace: web}}",
        "- {apiVersion: v1, kind: ConfigMap, metadata: {name: b, namespace: web}}",
        "",
      ].join("\n"),
    );
    const m = await manifestFile(path);
    expect(m).toMatchObject({ name: "web-app", objects: 3 });
    expect(JSON.parse(m.objectsJson).map((o: { metadata: { name: string } }) => o.metadata.name)).toEqual(["web", "a", "b"]);
    expect((await manifestFile(path, "other")).name).toBe("other");
  });

  test("a folder: one manifest per YAML or JSON file, sorted; other files left alone", async () => {
    const folder = join(dir.path, "addons");
    mkdirSync(folder);
    writeFileSync(join(folder, "b.json"), JSON.stringify({ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "b" } }));
    writeFileSync(join(folder, "a.yml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n");
    writeFileSync(join(folder, "README.md"), "not a manifest");
    expect((await manifestFiles(folder)).map((m) => m.name)).toEqual(["a", "b"]);
    expect(await refused(manifestFiles(folder, "x"))).toBe("--name names one file's manifest; a folder's are named after their files");
  });

  test("mistakes are named with their file, before any call", async () => {
    expect(await refused(manifestFile(write("Bad_Name.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n")))).toMatch(
      /Bad_Name\.yaml: its name is not a manifest name .*; give one with --name$/,
    );
    expect(await refused(manifestFile(write("broken.yaml", "kind: [unclosed\n")))).toMatch(/broken\.yaml: not YAML or JSON: /);
    expect(await refused(manifestFile(write("noname.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n")))).toBe(
      "" + join(dir.path, "noname.yaml") + ': object 1 (ConfigMap): metadata.name "undefined" is not a name',
    );
    expect(await refused(manifestFile(write("empty.yaml", "---\n")))).toBe(`${join(dir.path, "empty.yaml")}: it holds no object`);
    expect(await refused(manifestFiles(join(dir.path, "missing")))).toBe(`${join(dir.path, "missing")}: cannot be read (ENOENT)`);
  });
});
