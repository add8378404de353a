// How the bench scripts print and summarise what they measure: one figure
// per line, name then value, and percentiles over the sorted samples.

import { join } from "node:path";
import { chooseAccelerator, manifestPaths, OUT_DIR, readManifest, REPO_ROOT } from "../image/mod.ts";

/** Prints "name ........ value", names padded to `width` so values line up. */
export function figure(name: string, value: string, width = 62): void {
  console.log(`${name.padEnd(width)} ${value}`);
}

export const ms = (n: number) => `${n.toFixed(1)} ms`;
export const seconds = (n: number, digits = 1) => `${(n / 1000).toFixed(digits)} s`;

/** "min / median / max s" of samples in ms ("—" for none); the median is the 50th percentile below. */
export function spread(samples: readonly number[], digits = 1): string {
  if (samples.length === 0) return "—";
  return `${(Math.min(...samples) / 1000).toFixed(digits)} / ${(percentile(samples, 50) / 1000).toFixed(digits)} / ${(Math.max(...samples) / 1000).toFixed(digits)} s`;
}

/** The sample at the p-th percentile (nearest rank from below; p50 of 5 samples is the 3rd). */
export function percentile(samples: readonly number[], p: number): number {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!;
}

/**
 * How qemu runs this bench's VMs, for its heading: "KVM -cpu host" or "TCG
 * -cpu max". The clusters' launches made the decision (image/accel.ts); this
 * reads it from the same cache.
 */
export async function qemuAccel(imageDir = join(REPO_ROOT, OUT_DIR)): Promise<string> {
  const choice = await chooseAccelerator({ kernel: manifestPaths(readManifest(imageDir), imageDir).kernel });
  return choice.accel === "kvm" ? "KVM -cpu host" : "TCG -cpu max";
}
