// Test-only: mod.ts does not export this file. A stand-in for the kernel's
// project quotas, for tests on a host whose kernel cannot mount a quota
// file system (no quota_v2); the real ones are tested in
// internal/localstorage/quota.test.ts where the kernel allows, and proven
// by every node at boot.

import { statSync } from "node:fs";
import type { ProjectQuotas } from "./volume_store.ts";

/**
 * A directory's project kept by its inode (as ext4 keeps it, across
 * renames), limits in a map; every project reports `usage` (none by
 * default): nothing is counted.
 */
export function recordingQuotas(usage: { usedBytes: number; usedInodes: number } = { usedBytes: 0, usedInodes: 0 }): ProjectQuotas & { limits: Map<number, number> } {
  const limits = new Map<number, number>();
  const projects = new Map<number, number>();
  return {
    limits,
    projectOf: (dir) => projects.get(statSync(dir).ino) ?? 0,
    assign: (dir, id) => void projects.set(statSync(dir).ino, id),
    setLimit: (id, bytes) => void limits.set(id, bytes),
    usage: (id) => ({ ...usage, limitBytes: limits.get(id) ?? 0 }),
    clear: (id) => void limits.delete(id),
  };
}
