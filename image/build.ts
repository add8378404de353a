// CLI: builds the node image into out/image (see mod.ts).
//
//   bun image/build.ts [--init out/init] [--kernel-format vmlinux|bzImage]
//                      [--out out/image] [--no-install] [--kubernetes DIR]
//
// --kubernetes DIR puts the Kubernetes server binaries from DIR
// (kube-apiserver, kube-controller-manager, kube-scheduler, kubelet) into
// the system image; without it, nodes say in their status that they are
// missing.

import { statSync } from "node:fs";
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { createLogger } from "../internal/log/mod.ts";
import { buildImage, imagePaths, type KernelFormat } from "./mod.ts";

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
  },
  strict: true,
});

const log = createLogger("image");
const started = performance.now();
try {
  const manifest = await buildImage({
    init: values.init === undefined ? undefined : resolve(values.init),
    outDir: values.out === undefined ? undefined : resolve(values.out),
    kernelFormat: kernelFormat(values["kernel-format"]),
    installPackages: !values["no-install"],
    ...(values.kubernetes === undefined ? {} : { kubernetesDir: resolve(values.kubernetes) }),
    logger: log,
  });
  const paths = imagePaths(manifest.kernel.format, values.out === undefined ? undefined : resolve(values.out));
  const allocated = statSync(paths.disk).blocks * BLOCK_BYTES;
  const lines = [
    `kernel     ${paths.kernel}  ${(manifest.kernel.bytes / MIB).toFixed(1)} MiB  (${manifest.kernel.package} ${manifest.kernel.packageVersion})`,
    `initramfs  ${paths.initramfs}  ${(manifest.initramfs.bytes / MIB).toFixed(1)} MiB  (${manifest.initramfs.modules.length} modules)`,
    `disk       ${paths.disk}  ${(manifest.disk.bytes / MIB).toFixed(0)} MiB  (${(allocated / MIB).toFixed(1)} MiB allocated)`,
    `manifest   ${paths.manifest}`,
  ];
  process.stdout.write(lines.join("\n") + "\n");
  log.info("image ready", { seconds: ((performance.now() - started) / 1000).toFixed(1) });
} catch (error) {
  log.error("image build failed", { error });
  if (error instanceof Error && error.cause !== undefined) log.error("caused by", { cause: error.cause });
  process.exitCode = 1;
}
