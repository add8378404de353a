// CLI: builds the node image into out/image (see mod.ts).
//
//   bun image/build.ts [--init out/init] [--kernel-format vmlinux|bzImage]
//                      [--out out/image] [--no-install] [--kubernetes DIR]
//                      [--version V] [--test-fault NAME] [--trial-bound SECONDS]
//
// --version V compiles the node init anew with version V stamped in (the
// slot's version, what nodes report): tests build v1, v2 and v3 of the
// same tree this way, each into its own --out. --test-fault NAME compiles a
// deliberately broken init (internal/version TEST_FAULTS), for the e2e of a
// failed update; it needs --version, and --out away from out/image.
// --trial-bound SECONDS: how long a trial boot of this version has to rejoin
// before it rolls back (30-3600; default 180).
//
// --kubernetes DIR puts the Kubernetes server binaries from DIR
// (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet) into
// the system image; without it, nodes say in their status that they are
// missing.

import { mkdirSync, statSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../internal/log/mod.ts";
import { TEST_FAULTS } from "../internal/version/mod.ts";
import { MAX_TRIAL_BOUND_S, MIN_TRIAL_BOUND_S } from "../internal/localstorage/mod.ts";
import { VERSION_PATTERN } from "../internal/update/mod.ts";
import { compile } from "./compile.ts";
import { buildImage, CACHE_DIR, imagePaths, OUT_DIR, REPO_ROOT, type KernelFormat } from "./mod.ts";

const KERNEL_FORMATS: readonly KernelFormat[] = ["vmlinux", "bzImage"];
const MIB = 1024 * 1024;
const BLOCK_BYTES = 512;

class UsageError extends Error {
  override name = "UsageError";
}

function kernelFormat(value: string | undefined): KernelFormat | undefined {
  if (value === undefined) return undefined;
  const format = KERNEL_FORMATS.find((f) => f === value);
  if (format === undefined) throw new UsageError(`unknown kernel format ${value}: want ${KERNEL_FORMATS.join(" or ")}`);
  return format;
}

const { values } = parseArgs({
  options: {
    init: { type: "string" },
    "kernel-format": { type: "string" },
    out: { type: "string" },
    "no-install": { type: "boolean", default: false },
    kubernetes: { type: "string" },
    version: { type: "string" },
    "test-fault": { type: "string" },
    "trial-bound": { type: "string" },
  },
  strict: true,
});

function trialBound(value: string): number {
  const seconds = Number(value);
  if (!/^\d+$/.test(value) || seconds < MIN_TRIAL_BOUND_S || seconds > MAX_TRIAL_BOUND_S)
    throw new UsageError(`--trial-bound ${value}: want whole seconds from ${MIN_TRIAL_BOUND_S} to ${MAX_TRIAL_BOUND_S}`);
  return seconds;
}

/** The init to put in the image: out/init, or one compiled now with --version (and --test-fault). */
async function initFor(version: string | undefined, fault: string | undefined, outDir: string): Promise<string | undefined> {
  if (fault !== undefined && !(TEST_FAULTS as readonly string[]).includes(fault)) throw new UsageError(`unknown test fault ${fault}: want one of ${TEST_FAULTS.join(", ")}`);
  if (fault !== undefined && version === undefined) throw new UsageError("--test-fault needs --version: a broken build must not pass for the tree's own version");
  if (fault !== undefined && resolve(outDir) === join(REPO_ROOT, OUT_DIR)) throw new UsageError(`--test-fault needs --out away from ${OUT_DIR}: the default image must never be a broken one`);
  if (version === undefined) return values.init === undefined ? undefined : resolve(values.init);
  if (values.init !== undefined) throw new UsageError("--version compiles the init itself; leave out --init");
  if (!VERSION_PATTERN.test(version)) throw new UsageError(`--version ${JSON.stringify(version)}: a version is letters, digits and . + _ - (at most 64)`);
  const dir = join(REPO_ROOT, CACHE_DIR, "inits");
  mkdirSync(dir, { recursive: true });
  return compile("init", version, { outfile: join(dir, `init-${version}${fault ? `-${fault}` : ""}`), ...(fault ? { testFault: fault } : {}) });
}

const log = createLogger("image");
const started = performance.now();
try {
  const outDir = values.out === undefined ? join(REPO_ROOT, OUT_DIR) : resolve(values.out);
  const manifest = await buildImage({
    init: await initFor(values.version, values["test-fault"], outDir),
    outDir: values.out === undefined ? undefined : resolve(values.out),
    kernelFormat: kernelFormat(values["kernel-format"]),
    installPackages: !values["no-install"],
    ...(values.kubernetes === undefined ? {} : { kubernetesDir: resolve(values.kubernetes) }),
    ...(values["trial-bound"] === undefined ? {} : { trialBoundS: trialBound(values["trial-bound"]) }),
    logger: log,
  });
  const paths = imagePaths(manifest.kernel.format, values.out === undefined ? undefined : resolve(values.out));
  const allocated = statSync(paths.disk).blocks * BLOCK_BYTES;
  const lines = [
    `version    ${manifest.version}`,
    `kernel     ${paths.kernel}  ${(manifest.kernel.bytes / MIB).toFixed(1)} MiB  (${manifest.kernel.package} ${manifest.kernel.packageVersion})`,
    `initramfs  ${paths.initramfs}  ${(manifest.initramfs.bytes / MIB).toFixed(1)} MiB  (${manifest.initramfs.modules.length} modules)`,
    `disk       ${paths.disk}  ${(manifest.disk.bytes / MIB).toFixed(0)} MiB  (${(allocated / MIB).toFixed(1)} MiB allocated)`,
    `bundle     ${paths.slot.dir}  (ctl node update --image, ctl cluster update --image)`,
    `manifest   ${paths.manifest}`,
  ];
  process.stdout.write(lines.join("\n") + "\n");
  log.info("image ready", { seconds: ((performance.now() - started) / 1000).toFixed(1) });
} catch (error) {
  log.error("image build failed", { error });
  if (error instanceof Error && error.cause !== undefined) log.error("caused by", { cause: error.cause });
  process.exitCode = 1;
}
