// Package version: the node software version, stamped in by build.ts.

declare const NODECORE_VERSION: string | undefined;
declare const NODECORE_TEST_FAULT: string | undefined;

/** The Kubernetes version this build carries (its kubelet's and apiserver's), as the image build pins it. */
export { KUBERNETES_VERSION } from "../../image/upstream/versions.ts";

/** The version of this build; "dev" when run from source. */
export const VERSION: string = typeof NODECORE_VERSION === "string" ? NODECORE_VERSION : "dev";

/**
 * Faults a test build may carry on purpose (`bun run image --test-fault
 * NAME`), so that the e2e can update a cluster to a version that is
 * broken in a known way. A normal build carries none.
 *
 *   no-rejoin   the node boots, opens its storage and joins, but never
 *               reports its status to the cluster: it never rejoins, so
 *               an update to it must roll itself back (internal/update)
 */
export const TEST_FAULTS = ["no-rejoin"] as const;
export type TestFault = (typeof TEST_FAULTS)[number];

/** This build's test fault, if it was built with one. */
export const TEST_FAULT: TestFault | undefined =
  typeof NODECORE_TEST_FAULT === "string" && (TEST_FAULTS as readonly string[]).includes(NODECORE_TEST_FAULT) ? (NODECORE_TEST_FAULT as TestFault) : undefined;
