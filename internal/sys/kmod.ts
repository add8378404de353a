// Kernel modules: resolve dependency order from modules.dep and load them.

import { openSync, closeSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { finitModule } from "./libc.ts";

export class ModuleError extends Error {
  override name = "ModuleError";
}

/** modules.dep as a map from module name to its file and direct dependencies. */
export interface ModuleIndex {
  files: Map<string, string>;
  deps: Map<string, string[]>;
}

/** The module name of a path: `kernel/fs/ext4/ext4.ko` → `ext4` (dashes count as underscores). */
export function moduleName(path: string): string {
  const base = path.slice(path.lastIndexOf("/") + 1).replace(/\.ko(\.(xz|zst|gz))?$/, "");
  return base.replaceAll("-", "_");
}

/** Parses modules.dep ("path: dep-path dep-path ..."). */
export function parseModulesDep(text: string): ModuleIndex {
  const files = new Map<string, string>();
  const deps = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const path = line.slice(0, colon).trim();
    const name = moduleName(path);
    files.set(name, path);
    deps.set(
      name,
      line
        .slice(colon + 1)
        .trim()
        .split(/\s+/)
        .filter(Boolean)
        .map(moduleName),
    );
  }
  return { files, deps };
}

/**
 * The order to load `wanted` in: every module after all of its dependencies,
 * each once. Unknown modules are an error naming them.
 */
export function loadOrder(index: ModuleIndex, wanted: readonly string[]): string[] {
  const order: string[] = [];
  const state = new Map<string, "visiting" | "done">();
  const visit = (raw: string, chain: string[]) => {
    const name = raw.replaceAll("-", "_");
    if (state.get(name) === "done") return;
    if (state.get(name) === "visiting") throw new ModuleError(`module dependency cycle: ${[...chain, name].join(" -> ")}`);
    const deps = index.deps.get(name);
    if (!deps) throw new ModuleError(`module ${name} is not in modules.dep${chain.length ? ` (needed by ${chain.at(-1)})` : ""}`);
    state.set(name, "visiting");
    for (const dep of deps) visit(dep, [...chain, name]);
    state.set(name, "done");
    order.push(name);
  };
  for (const name of wanted) visit(name, []);
  return order;
}

/** Loads `wanted` and their dependencies from `moduleDir` (which holds modules.dep). Returns the order used. */
export function loadModules(moduleDir: string, wanted: readonly string[], onLoaded?: (name: string) => void): string[] {
  const index = parseModulesDep(readFileSync(join(moduleDir, "modules.dep"), "utf8"));
  const order = loadOrder(index, wanted);
  for (const name of order) {
    const path = join(moduleDir, index.files.get(name)!);
    const fd = openSync(path, "r");
    try {
      finitModule(fd);
    } catch (err) {
      throw new ModuleError(`could not load module ${name} from ${path}: ${(err as Error).message}`, { cause: err });
    } finally {
      closeSync(fd);
    }
    onLoaded?.(name);
  }
  return order;
}
