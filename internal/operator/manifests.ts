// `ctl cluster manifests`: the owner's side of the add-on manifests
// (internal/kubernetes/manifests.ts). A file is YAML (one or more
// documents) or JSON; a List's items are its objects. Everything is checked
// here first with the rules the curator applies (parseManifestObjects), so
// that a mistake costs no call and is named in one line with its file.
//
//   apply <file>   one manifest, named after the file (--name to choose)
//   apply <dir>    one manifest per *.yaml, *.yml and *.json file in it
//   list | delete <name>

import { readdirSync, readFileSync, statSync } from "node:fs";
import { basename, extname, join } from "node:path";
import type { ManifestShown } from "../../proto/gen/api/management_pb.ts";
import { manifestNameProblem, MAX_MANIFESTS, parseManifestObjects } from "../kubernetes/mod.ts";
import { UsageError } from "./cli_table.ts";
import { formatBytes } from "../log/mod.ts";
import { alignColumns, formatDuration } from "./format.ts";

const MANIFEST_EXTENSIONS = [".yaml", ".yml", ".json"];

/** A manifest as ctl sends it. */
export interface ManifestFile {
  file: string;
  name: string;
  objectsJson: string;
  objects: number;
}

/**
 * The objects of a file's text: YAML documents (JSON is YAML; bun's own
 * parser), empty ones skipped; a List's items, or a top-level array's, are
 * objects each.
 */
export function manifestObjects(text: string, file: string): unknown[] {
  let parsed: unknown;
  try {
    parsed = Bun.YAML.parse(text);
  } catch (error) {
    throw new UsageError(`${file}: not YAML or JSON: ${(error as Error).message.split("\n")[0]!.slice(0, 160)}`);
  }
  // Several documents come as an array of them; so does one that is an array, whose items are objects too.
  const documents = Array.isArray(parsed) ? parsed : [parsed];
  const objects: unknown[] = [];
  for (const document of documents) {
    if (document === null || document === undefined) continue;
    const { kind, items } = document as { kind?: unknown; items?: unknown };
    if (Array.isArray(document)) objects.push(...(document as unknown[]));
    else if (typeof kind === "string" && kind.endsWith("List") && Array.isArray(items)) objects.push(...items);
    else objects.push(document);
  }
  return objects;
}

/** One file as a manifest, checked as the curator will check it. */
export async function manifestFile(file: string, name?: string, readFile: (path: string) => string = (p) => readFileSync(p, "utf8")): Promise<ManifestFile> {
  const chosen = name ?? basename(file, extname(file));
  const problem = manifestNameProblem(chosen);
  if (problem) throw new UsageError(name === undefined ? `${file}: its name ${problem.replace(/^"[^"]*" /, "")}; give one with --name` : `--name: ${problem}`);
  let text: string;
  try {
    text = readFile(file);
  } catch (error) {
    throw new UsageError(`${file}: cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  const objectsJson = JSON.stringify(manifestObjects(text, file));
  const objects = parseManifestObjects(objectsJson);
  if (typeof objects === "string") throw new UsageError(`${file}: ${objects}`);
  return { file, name: chosen, objectsJson, objects: objects.length };
}

/** What `apply <path>` sends: the file, or each manifest file in the folder (sorted; at least one). */
export async function manifestFiles(path: string, name?: string): Promise<ManifestFile[]> {
  let folder: boolean;
  try {
    folder = statSync(path).isDirectory();
  } catch (error) {
    throw new UsageError(`${path}: cannot be read (${(error as NodeJS.ErrnoException).code ?? (error as Error).message})`);
  }
  if (!folder) return [await manifestFile(path, name)];
  if (name !== undefined) throw new UsageError("--name names one file's manifest; a folder's are named after their files");
  const files = readdirSync(path)
    .filter((f) => MANIFEST_EXTENSIONS.includes(extname(f)))
    .sort();
  if (files.length === 0) throw new UsageError(`${path}: no ${MANIFEST_EXTENSIONS.map((e) => `*${e}`).join(", ")} file in it`);
  if (files.length > MAX_MANIFESTS) throw new UsageError(`${path}: ${files.length} manifest files, more than the ${MAX_MANIFESTS} a cluster keeps`);
  const manifests = await Promise.all(files.map((f) => manifestFile(join(path, f))));
  const names = new Set<string>();
  for (const m of manifests) {
    if (names.has(m.name)) throw new UsageError(`${m.file}: another file in ${path} has the name ${m.name}`);
    names.add(m.name);
  }
  return manifests;
}

export function manifestTable(manifests: readonly ManifestShown[], nowMs: number = Date.now()): string {
  if (manifests.length === 0) return "no add-on manifest stored (ctl cluster manifests apply <file|dir>)";
  const rows = [
    ["NAME", "OBJECTS", "SIZE", "SHA256", "STORED"],
    ...manifests.map((m) => [m.name, m.objects.join(", "), formatBytes(m.bytes), m.sha256.slice(0, 12), `${formatDuration(Math.max(0, nowMs - Number(m.updatedMs)))} ago`]),
  ];
  return alignColumns(rows).join("\n");
}
