// Every bench's command line, read one way: `--help` prints its usage and
// exits 0; an unknown flag, a missing value or a bad number is one line on
// stderr naming it, and exit 2, before anything is built or launched.
// test/benches.test.ts runs each bench with --help and with a wrong flag,
// so a bench that no longer loads, or reads its arguments wrongly, fails
// CI instead of its next user (issue 47: bench/boot.ts had stopped
// running unnoticed).

import { basename, join } from "node:path";
import { parseArgs } from "node:util";
import { OUT_DIR, REPO_ROOT } from "../image/mod.ts";

export interface BenchFlag {
  type: "string" | "boolean";
  default?: string | boolean;
  /** What it does, for --help ("how many runs", "skip the build"). */
  help: string;
}

export interface BenchPositional {
  name: string;
  default: string;
  help: string;
}

/** The flags of every bench that boots the node image: build it first or not, and which image. */
export const IMAGE_FLAGS = {
  "no-build": { type: "boolean", help: "use the image as built" },
  "image-dir": { type: "string", help: "the image to boot (default out/image)" },
} as const satisfies Record<string, BenchFlag>;

/** The image a bench boots: --image-dir, or the one the build writes. */
export function imageDirOf(values: { "image-dir"?: string | undefined }): string {
  return values["image-dir"] ?? join(REPO_ROOT, OUT_DIR);
}

type Values<F extends Record<string, BenchFlag>> = {
  [K in keyof F]: F[K]["type"] extends "boolean" ? boolean : F[K] extends { default: string } ? string : string | undefined;
};

/** The script's name as the usage line shows it: bench/<file>. */
function scriptName(): string {
  return `bench/${basename(process.argv[1] ?? "bench")}`;
}

/** Ends the bench with one line naming what was wrong with its command line. */
export function usageError(message: string): never {
  console.error(`${scriptName()}: ${message} (--help lists the arguments)`);
  process.exit(2);
}

/** The usage text: the synopsis, then each argument with its default. */
export function usageText(script: string, flags: Record<string, BenchFlag>, positional?: BenchPositional): string {
  const parts = Object.entries(flags).map(([name, f]) => (f.type === "boolean" ? `[--${name}]` : `[--${name} ${name.toUpperCase().replaceAll("-", "_")}]`));
  if (positional) parts.unshift(`[${positional.name}]`);
  const lines = [`usage: bun ${script}${parts.length ? ` ${parts.join(" ")}` : ""}`];
  const rows: [string, string][] = [];
  if (positional) rows.push([positional.name, `${positional.help} (default ${positional.default})`]);
  for (const [name, f] of Object.entries(flags)) rows.push([`--${name}`, f.default === undefined || f.type === "boolean" ? f.help : `${f.help} (default ${f.default})`]);
  const width = Math.max(0, ...rows.map(([n]) => n.length));
  for (const [name, help] of rows) lines.push(`  ${name.padEnd(width)}  ${help}`);
  return lines.join("\n");
}

/**
 * The bench's flags and its one optional positional argument, from
 * process.argv; --help prints the usage and exits.
 */
export function benchArgs<const F extends Record<string, BenchFlag>>(
  flags: F,
  positional?: BenchPositional,
  argv: readonly string[] = process.argv.slice(2),
): { values: Values<F>; positional: string } {
  if (argv.includes("--help") || argv.includes("-h")) {
    console.log(usageText(scriptName(), flags, positional));
    process.exit(0);
  }
  const options: Record<string, { type: "string" | "boolean"; default?: string | boolean }> = {};
  for (const [name, { type, default: value }] of Object.entries(flags))
    options[name] = type === "boolean" ? { type, default: value ?? false } : value === undefined ? { type } : { type, default: value };
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options, strict: true, allowPositionals: positional !== undefined });
  } catch (err) {
    usageError((err as Error).message.split("\n")[0]!);
  }
  if (parsed.positionals.length > 1) usageError(`one ${positional!.name} at most, not ${parsed.positionals.length} arguments`);
  return { values: parsed.values as Values<F>, positional: parsed.positionals[0] ?? positional?.default ?? "" };
}

/** A whole number argument from min to max, or the bench ends naming it. */
export function wholeNumber(name: string, text: string | undefined, min = 1, max = Number.MAX_SAFE_INTEGER): number {
  const value = Number(text);
  if (text === undefined || !/^\d+$/.test(text) || value < min || value > max) {
    usageError(`${name} must be a whole number from ${min}${max === Number.MAX_SAFE_INTEGER ? " up" : ` to ${max}`}, not ${JSON.stringify(text ?? "")}`);
  }
  return value;
}
