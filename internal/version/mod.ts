// Package version: the node software version, stamped in by build.ts.

declare const NODECORE_VERSION: string | undefined;

/** The version of this build; "dev" when run from source. */
export const VERSION: string = typeof NODECORE_VERSION === "string" ? NODECORE_VERSION : "dev";
