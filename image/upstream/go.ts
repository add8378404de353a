// The Go toolchain as the upstream build uses it: the machine's own Go and
// nothing else (GOTOOLCHAIN=local: a module asking for a newer Go fails
// instead of fetching one), modules only as go.sum pins them.

import { dirname } from "node:path";

export const UPSTREAM_DIR = dirname(new URL(import.meta.url).pathname);

/** The go directive of every wrapper: the oldest Go every upstream accepts. */
export const GO_VERSION_LINE = "go 1.26.8";

/** The environment of every go command here, plus extra. */
export function goEnv(extra: Record<string, string> = {}): Record<string, string> {
  return { GOTOOLCHAIN: "local", GOFLAGS: "-mod=readonly", ...extra };
}
