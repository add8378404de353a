// The folders are the architecture, and these are its two rules as checks:
// a package reaches another only through its mod.ts, and no chain of
// imports between packages leads back to where it started. Test files and
// test-only fixtures (test_cluster.ts, fake_curator.ts) may reach further.

import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";

const INTERNAL = join(import.meta.dir, "..", "internal");
const TEST_ONLY = /(\.test\.ts|\/test_cluster\.ts|\/fake_curator\.ts)$/;

/** Every import between two packages of internal/: [from file, to file], both relative to internal/. */
function crossImports(): [string, string][] {
  const out: [string, string][] = [];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (path.endsWith(".ts") && !TEST_ONLY.test(path)) {
        for (const match of readFileSync(path, "utf8").matchAll(/from\s+"(\.[^"]+)"/g)) {
          const target = resolve(dirname(path), match[1]!);
          if (!target.startsWith(INTERNAL + "/")) continue;
          const [from, to] = [relative(INTERNAL, path), relative(INTERNAL, target)];
          if (packageOf(from) !== packageOf(to)) out.push([from, to]);
        }
      }
    }
  };
  walk(INTERNAL);
  return out;
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

test("the cycle check finds a cycle when there is one", () => {
  const edges = new Map([
    ["cluster", new Set(["coldstart", "pki"])],
    ["coldstart", new Set(["cluster"])],
    ["pki", new Set<string>()],
  ]);
  expect(cycles(edges)).toEqual([["cluster", "coldstart"]]);
});
