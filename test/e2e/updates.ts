// What the update e2e steps share: building another version of the image,
// as an operator would (`bun run image --version V --out DIR`), and naming
// the version after the one the nodes run.

import { join } from "node:path";
import { runHostCommand } from "../launch/mod.ts";
import { REPO_ROOT } from "../../image/mod.ts";
import type { E2eContext } from "./harness.ts";

/** A built update: its version and the bundle directory ctl streams. */
export interface UpdateImage {
  version: string;
  bundle: string;
}

/** `version` with its patch release raised by `by`, and "-<tag>" in place of its build metadata ("0.1.0+abc" → "0.1.1-e2e"). */
export function nextVersion(version: string, by: number, tag = "e2e"): string {
  const [major = 0, minor = 0, patch = 0] = (version.split(/[+-]/, 1)[0] ?? "").split(".").map((part) => (/^\d+$/.test(part) ? Number(part) : 0));
  return `${major}.${minor}.${patch + by}-${tag}`;
}

/** Builds the image at `version` beside the e2e's own (the shared cache makes everything but the init and the slot's files a hit). */
export async function buildUpdateImage(ctx: E2eContext, options: { version: string; name: string; testFault?: string; trialBoundS?: number }): Promise<UpdateImage> {
  const outDir = join(ctx.imageDir, "..", `image-e2e-${options.name}`);
  const started = performance.now();
  await runHostCommand([
    process.execPath,
    join(REPO_ROOT, "image/build.ts"),
    "--no-install",
    "--version",
    options.version,
    "--out",
    outDir,
    ...(options.testFault ? ["--test-fault", options.testFault] : []),
    ...(options.trialBoundS !== undefined ? ["--trial-bound", String(options.trialBoundS)] : []),
  ]);
  ctx.logger.info(`built ${options.name} (${options.version}${options.testFault ? `, test fault ${options.testFault}` : ""})`, { seconds: ((performance.now() - started) / 1000).toFixed(1) });
  return { version: options.version, bundle: join(outDir, "slot") };
}
