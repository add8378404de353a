// The folders are the architecture, and these are its rules as checks: a
// package reaches another only through its mod.ts, and so do the programs
// around internal/ (cmd/, image/, bench/); no chain of imports between
// packages leads back to where it started; and nothing below the root
// imports the root's build.ts (image/compile.ts is what both build with);
// the owner's side stands on the curator's and node management's clients,
// never on their servers.
// Test files and test-only fixtures (test_cluster.ts, fake_curator.ts) may
// reach further.

import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const ROOT = join(import.meta.dir, "..");
const INTERNAL = join(ROOT, "internal");
const TEST_ONLY = /(\.test\.ts|\/test_cluster\.ts|\/fake_curator\.ts)$/;

/** Every relative import of the .ts files below `dir` but test files and fixtures: [from file, resolved target]. */
function importsBelow(dir: string): [string, string][] {
  const out: [string, string][] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (path.endsWith(".ts") && !TEST_ONLY.test(path)) {
        for (const match of readFileSync(path, "utf8").matchAll(/from\s+"(\.[^"]+)"/g)) out.push([path, resolve(dirname(path), match[1]!)]);
      }
    }
  };
  walk(dir);
  return out;
}

/** Every import between two packages of internal/: [from file, to file], both relative to internal/. */
function crossImports(): [string, string][] {
  return importsBelow(INTERNAL)
    .filter(([, to]) => to.startsWith(INTERNAL + "/"))
    .map(([from, to]): [string, string] => [relative(INTERNAL, from), relative(INTERNAL, to)])
    .filter(([from, to]) => packageOf(from) !== packageOf(to));
}

/** The package a file belongs to: its first folder (curator/client is curator's). */
const packageOf = (file: string) => file.split("/")[0]!;

/** The cycles of a directed graph (its strongly connected components of more than one node). */
function cycles(edges: Map<string, Set<string>>): string[][] {
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const found: string[][] = [];
  const visit = (v: string) => {
    index.set(v, index.size);
    low.set(v, index.get(v)!);
    stack.push(v);
    for (const w of edges.get(v) ?? []) {
      if (!index.has(w)) {
        visit(w);
        low.set(v, Math.min(low.get(v)!, low.get(w)!));
      } else if (stack.includes(w)) low.set(v, Math.min(low.get(v)!, index.get(w)!));
    }
    if (low.get(v) === index.get(v)) {
      const component: string[] = [];
      let w: string;
      do {
        w = stack.pop()!;
        component.push(w);
      } while (w !== v);
      if (component.length > 1) found.push(component.sort());
    }
  };
  for (const v of edges.keys()) if (!index.has(v)) visit(v);
  return found;
}

test("a package reaches another only through its mod.ts (curator/client's mod.ts included)", () => {
  const past = crossImports().filter(([, to]) => !to.endsWith("/mod.ts"));
  expect(past.map(([from, to]) => `${from} -> ${to}`)).toEqual([]);
});

test("no chain of imports between packages leads back to where it started", () => {
  const edges = new Map<string, Set<string>>();
  for (const [from, to] of crossImports()) {
    const set = edges.get(packageOf(from)) ?? new Set<string>();
    set.add(packageOf(to));
    edges.set(packageOf(from), set);
  }
  expect(edges.size).toBeGreaterThan(10);
  expect(cycles(edges)).toEqual([]);
});

test("cmd/, image/ and bench/ reach internal/ only through its packages' mod.ts", () => {
  const past = ["cmd", "image", "bench"]
    .flatMap((dir) => importsBelow(join(ROOT, dir)))
    .filter(([, to]) => to.startsWith(INTERNAL + "/") && !to.endsWith("/mod.ts") && !TEST_ONLY.test(to))
    .map(([from, to]) => `${relative(ROOT, from)} -> ${relative(ROOT, to)}`);
  expect(past).toEqual([]);
});

test("the owner's side (internal/operator, cmd/ctl) reaches the curator and node management only through their clients", () => {
  const servers = ["curator", "nodemgmt"].map((name) => join(INTERNAL, name, "mod.ts"));
  const past = [join(INTERNAL, "operator"), join(ROOT, "cmd", "ctl")]
    .flatMap((dir) => importsBelow(dir))
    .filter(([, to]) => servers.includes(to))
    .map(([from, to]) => `${relative(ROOT, from)} -> ${relative(ROOT, to)}`);
  expect(past).toEqual([]);
});

test("nothing below the root imports the root's build.ts", () => {
  const upward = ["cmd", "image", "bench", "internal", "test"]
    .flatMap((dir) => importsBelow(join(ROOT, dir)))
    .filter(([, to]) => to === join(ROOT, "build.ts"))
    .map(([from]) => relative(ROOT, from));
  expect(upward).toEqual([]);
});

test("the cycle check finds a cycle when there is one", () => {
  const edges = new Map([
    ["cluster", new Set(["coldstart", "pki"])],
    ["coldstart", new Set(["cluster"])],
    ["pki", new Set<string>()],
  ]);
  expect(cycles(edges)).toEqual([["cluster", "coldstart"]]);
});
