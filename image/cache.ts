// Skipping steps whose inputs did not change.
//
// Each step names its inputs: parameters (JSON) and files (hashed by content,
// including the builder's own source files, so editing a step rebuilds its
// output). The fingerprint of those inputs is stored beside the output as
// <output>.inputs; a step runs only when the output is missing or the stored
// fingerprint differs. The fingerprint is written after the output is
// complete, so an interrupted step is never mistaken for a finished one.

import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { FINGERPRINT_SUFFIX } from "./layout.ts";
import { BUNDLE_CHUNK_BYTES } from "../internal/update/mod.ts";

export interface StepInputs {
  /** Parameters that shape the output; serialised as JSON. */
  params: Record<string, unknown>;
  /** Files whose contents shape the output. */
  files: readonly string[];
}

/** The sha256 of a file's contents, hex. */
export async function hashFile(path: string): Promise<string> {
  const hasher = new Bun.CryptoHasher("sha256");
  for await (const chunk of Bun.file(path).stream()) hasher.update(chunk);
  return hasher.digest("hex");
}

/** The sha256 of each `chunkBytes` of a file, in order (the last may be shorter), hex: the chunks an update bundle lists (internal/update/bundle.ts). */
export async function chunkDigests(path: string, chunkBytes = BUNDLE_CHUNK_BYTES): Promise<string[]> {
  // Read as a stream, so that a large system image is never held in memory whole.
  const digests: string[] = [];
  let hasher = new Bun.CryptoHasher("sha256");
  let filled = 0;
  for await (const piece of Bun.file(path).stream()) {
    for (let at = 0; at < piece.length;) {
      const take = Math.min(chunkBytes - filled, piece.length - at);
      hasher.update(piece.subarray(at, at + take));
      filled += take;
      at += take;
      if (filled === chunkBytes) {
        digests.push(hasher.digest("hex"));
        hasher = new Bun.CryptoHasher("sha256");
        filled = 0;
      }
    }
  }
  if (filled > 0) digests.push(hasher.digest("hex"));
  return digests;
}

/** The sha256 over a step's parameters and the contents of its files, hex. */
export async function fingerprint(inputs: StepInputs): Promise<string> {
  const files: Record<string, string> = {};
  for (const file of [...inputs.files].sort()) files[file] = await hashFile(file);
  const hasher = new Bun.CryptoHasher("sha256");
  hasher.update(JSON.stringify({ params: inputs.params, files }));
  return hasher.digest("hex");
}

function stampPath(output: string): string {
  return output + FINGERPRINT_SUFFIX;
}

/** Whether output exists and was built from inputs with this fingerprint. */
export function isFresh(output: string, print: string): boolean {
  if (!existsSync(output) || !existsSync(stampPath(output))) return false;
  return readFileSync(stampPath(output), "utf8").trim() === print;
}

/** Records that output is complete and was built from inputs with this fingerprint. */
export function markFresh(output: string, print: string): void {
  writeFileSync(stampPath(output), print + "\n");
}

/** Forgets output's fingerprint before rebuilding it. */
export function markStale(output: string): void {
  rmSync(stampPath(output), { force: true });
}

export interface CachedStepOptions {
  inputs: StepInputs;
  /** Must leave a complete output at the output path, or throw. */
  build: () => Promise<void>;
}

/** Runs options.build unless output is fresh for options.inputs. Returns whether it ran. */
export async function cachedStep(output: string, { inputs, build }: CachedStepOptions): Promise<boolean> {
  const print = await fingerprint(inputs);
  if (isFresh(output, print)) return false;
  markStale(output);
  await build();
  markFresh(output, print);
  return true;
}
