// Kernel modules: load the image's module list in order. The node has no
// modprobe: the image builder (image/modules.ts) resolves dependencies and
// soft dependencies once, at build time, and ships the load order as a list.

import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { finitModule } from "./libc.ts";

export class ModuleError extends Error {
  override name = "ModuleError";
}

/** The module paths of a load list: one per line, relative to the modules dir; blanks and # comments skipped. */
export function parseLoadList(text: string): string[] {
  return text
    .split("\n")
    .map((line) => line.trim())
    .filter((line) => line !== "" && !line.startsWith("#"));
}

/**
 * Loads every module of `moduleDir/listFile` in its order; already-loaded
 * modules count as done. Returns the paths loaded.
 */
export function loadModules(moduleDir: string, listFile: string, onLoaded?: (path: string) => void): string[] {
  const listPath = join(moduleDir, listFile);
  if (!existsSync(listPath)) throw new ModuleError(`no module list at ${listPath}: was the image built by image/build.ts?`);
  const paths = parseLoadList(readFileSync(listPath, "utf8"));
  for (const path of paths) {
    const full = join(moduleDir, path);
    let fd: number;
    try {
      fd = openSync(full, "r");
    } catch (err) {
      throw new ModuleError(`module ${path} is in ${listFile} but missing from the image: ${(err as Error).message}`, { cause: err });
    }
    try {
      finitModule(fd);
    } catch (err) {
      throw new ModuleError(`could not load module ${path}: ${(err as Error).message}`, { cause: err });
    } finally {
      closeSync(fd);
    }
    onLoaded?.(path);
  }
  return paths;
}
