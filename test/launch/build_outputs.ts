// Brings the binaries and the image up to date before a launch: `bun run
// build` (out/init, out/ctl, and out/system: the upstream binaries built
// from their Go modules, cached by version) and `bun image/build.ts`
// (out/image). Both skip what did not change, so this is quick when nothing
// did. Their own lines go straight to the launcher's console: a cold
// upstream build takes minutes per component, and says what it is doing
// as it goes (image/upstream/build.ts).

import { REPO_ROOT } from "../../image/mod.ts";
import type { Logger } from "../../internal/log/mod.ts";
import { runHostCommand } from "./host_command.ts";

const STEPS: readonly { what: string; argv: readonly string[] }[] = [
  { what: "binaries (bun run build)", argv: ["run", "build"] },
  { what: "image (bun image/build.ts)", argv: ["image/build.ts"] },
];

/** Runs both builds in the repository, in order (the binaries alone for node processes), showing their output; a failure throws naming the step, after the build has printed why. */
export async function ensureBuilt(logger: Logger, options: { binariesOnly?: boolean; kubernetesDir?: string } = {}): Promise<void> {
  for (const step of options.binariesOnly ? STEPS.slice(0, 1) : STEPS) {
    const started = performance.now();
    logger.info(`building ${step.what}`);
    const extra = step === STEPS[1] && options.kubernetesDir ? ["--kubernetes", options.kubernetesDir] : [];
    await runHostCommand([process.execPath, ...step.argv, ...extra], { cwd: REPO_ROOT, inherit: true });
    logger.info(`built ${step.what}`, { seconds: ((performance.now() - started) / 1000).toFixed(1) });
  }
}
