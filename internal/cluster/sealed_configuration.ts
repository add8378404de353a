// Writing the sealed configuration to the ESP, atomically: once at
// enrolment (writeSealedConfiguration), and afterwards by the role server's
// workers, each through updateSealedConfiguration.

import { clone, equals, toBinary } from "@bufbuild/protobuf";
import { mkdirSync } from "node:fs";
import type { Value } from "../event/mod.ts";
import { exclusively, writeFileDurably, writeFileDurablyAsync, type StorageLayout } from "../localstorage/mod.ts";
import { dirname } from "node:path";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import { readSealedConfiguration } from "./node_parameters.ts";

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
