// The sealed configuration (sealed.pb on the ESP): what a node keeps to
// rejoin its cluster at every later boot. Its one home: read it
// (readSealedConfiguration), write it once at enrolment
// (writeSealedConfiguration), and change it afterwards (the role server's
// sealed-configuration and cold-start workers) through
// updateSealedConfiguration. It lives with the storage, below both the
// cluster flows and the cold-start package, so that either can use it
// without the other (Metropolis keeps it in localstorage's ESP directory).

import { clone, equals, fromBinary, toBinary } from "@bufbuild/protobuf";
import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { dirname } from "node:path";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import type { Value } from "../event/mod.ts";
import { writeFileDurably, writeFileDurablyAsync } from "./durable_file.ts";
import { exclusively } from "./exclusive.ts";
import type { StorageLayout } from "./layout.ts";

/** The sealed configuration is there but cannot be used: the node must not start over (that would lose its data). */
export class SealedConfigurationError extends Error {
  override name = "SealedConfigurationError";
}

/** The sealed configuration, if the node has one; corrupt is an error (never a reason to start over). */
export function readSealedConfiguration(path: string): SealedConfiguration | undefined {
  if (!existsSync(path)) return undefined;
  let bytes: Uint8Array;
  try {
    bytes = readFileSync(path);
  } catch (err) {
    throw new SealedConfigurationError(`sealed configuration at ${path} could not be read (${(err as Error).message}): is the ESP damaged?`, { cause: err });
  }
  try {
    const sealed = fromBinary(SealedConfigurationSchema, bytes);
    if (sealed.nodeUnlockKey.length !== 32 || sealed.joinKey.length !== 32 || sealed.clusterCa.length === 0) {
      throw new Error("missing node unlock key, join key or cluster CA");
    }
    return sealed;
  } catch (err) {
    throw new SealedConfigurationError(`sealed configuration at ${path} is corrupt: ${(err as Error).message}; refusing to start over, as that would lose the node's data`, { cause: err });
  }
}

/** Writes to a temporary file, syncs it and renames it, so a crash or power cut never leaves half a file. */
export function writeSealedConfiguration(path: string, sealed: SealedConfiguration): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileDurably(path, toBinary(SealedConfigurationSchema, sealed), { mode: 0o600 });
}

/**
 * Reads the sealed configuration, lets `change` edit a copy, and writes and
 * publishes the copy if it differs; returns the configuration before and
 * after, or undefined when the ESP has none. All of it under the ESP's lock
 * (localstorage exclusively): a scrub may have the ESP full, and the workers
 * that update the file (sealed configuration, cold start) must not write
 * over each other's changes. The write's fsyncs run off the event loop.
 */
export function updateSealedConfiguration(
  esp: StorageLayout["esp"],
  published: Value<SealedConfiguration>,
  change: (next: SealedConfiguration) => void,
): Promise<{ previous: SealedConfiguration; next: SealedConfiguration } | undefined> {
  return exclusively(esp.path, async () => {
    const previous = readSealedConfiguration(esp.sealed);
    if (!previous) return undefined;
    const next = clone(SealedConfigurationSchema, previous);
    change(next);
    if (!equals(SealedConfigurationSchema, previous, next)) {
      await writeFileDurablyAsync(esp.sealed, toBinary(SealedConfigurationSchema, next), { mode: 0o600 });
      published.set(next);
    }
    return { previous, next };
  });
}
