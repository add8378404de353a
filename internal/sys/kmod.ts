// Kernel modules: load the image's module list in order. The node has no
// modprobe: the image builder (image/modules.ts) resolves dependencies and
// soft dependencies once, at build time, and ships the load order as a list.
//
// A line is a module's path, optionally followed by `cpu=<flag>,<flag>`:
// the /proc/cpuinfo flags the module needs (the CPU's AES, SHA and CRC
// instructions). Where the CPU lacks one, the module is skipped and the
// kernel's generic code serves; where it has them all and the module still
// fails, that is said too, and the node goes on without the speed-up.

import { closeSync, existsSync, openSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { finitModule } from "./libc.ts";

export class ModuleError extends Error {
  override name = "ModuleError";
}

export interface LoadListEntry {
  path: string;
  /** CPU flags the module needs; empty for a module every CPU loads. */
  cpu: string[];
}

/** The entries of a load list: one per line, relative to the modules dir; blanks and # comments skipped. */
export function parseLoadList(text: string): LoadListEntry[] {
  const entries: LoadListEntry[] = [];
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const [path, ...conditions] = line.split(/\s+/) as [string, ...string[]];
    const cpu: string[] = [];
    for (const condition of conditions) {
      const match = /^cpu=([a-z0-9_,]+)$/.exec(condition);
      if (!match) throw new ModuleError(`the load list's line for ${path} has ${JSON.stringify(condition.slice(0, 40))}, which is no cpu=<flags> condition`);
      cpu.push(...match[1]!.split(",").filter(Boolean));
    }
    entries.push({ path, cpu });
  }
  return entries;
}

/** The flags of the first CPU in /proc/cpuinfo's text (x86: "flags"). */
export function cpuFlags(cpuinfo: string): Set<string> {
  const line = /^flags\s*:(.*)$/m.exec(cpuinfo)?.[1] ?? "";
  return new Set(line.trim().split(/\s+/).filter(Boolean));
}

export interface ModulesLoaded {
  /** Paths loaded (or already loaded), in order. */
  loaded: string[];
  /** Modules that were left out, each with why: a CPU flag missing, or the module's own refusal. */
  skipped: { path: string; reason: string }[];
}

export interface LoadOptions {
  /** The CPU's flags (default: read from /proc/cpuinfo). */
  cpuFlags?: Set<string>;
  onLoaded?: (path: string) => void;
}

/**
 * Loads every module of `moduleDir/listFile` in its order; already-loaded
 * modules count as done. A module that needs CPU flags is skipped where
 * they are missing, and passed over where it fails anyway; any other
 * module's failure is an error.
 */
export function loadModules(moduleDir: string, listFile: string, options: LoadOptions = {}): ModulesLoaded {
  const listPath = join(moduleDir, listFile);
  if (!existsSync(listPath)) throw new ModuleError(`no module list at ${listPath}: was the image built by image/build.ts?`);
  const entries = parseLoadList(readFileSync(listPath, "utf8"));
  let flags = options.cpuFlags;
  const result: ModulesLoaded = { loaded: [], skipped: [] };
  for (const { path, cpu } of entries) {
    if (cpu.length > 0) {
      flags ??= cpuFlags(readFileSync("/proc/cpuinfo", "utf8"));
      const missing = cpu.filter((flag) => !flags!.has(flag));
      if (missing.length > 0) {
        result.skipped.push({ path, reason: `the CPU lacks ${missing.join(", ")}` });
        continue;
      }
    }
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
      if (cpu.length === 0) throw new ModuleError(`could not load module ${path}: ${(err as Error).message}`, { cause: err });
      result.skipped.push({ path, reason: (err as Error).message });
      continue;
    } finally {
      closeSync(fd);
    }
    result.loaded.push(path);
    options.onLoaded?.(path);
  }
  return result;
}
