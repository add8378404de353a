// Writing the sealed configuration to the ESP, atomically.

import { toBinary } from "@bufbuild/protobuf";
import { mkdirSync } from "node:fs";
import { writeFileDurably, writeFileDurablyAsync } from "../localstorage/mod.ts";
import { dirname } from "node:path";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";

/** Writes to a temporary file, syncs it and renames it, so a crash or power cut never leaves half a file. */
export function writeSealedConfiguration(path: string, sealed: SealedConfiguration): void {
  mkdirSync(dirname(path), { recursive: true });
  writeFileDurably(path, toBinary(SealedConfigurationSchema, sealed), { mode: 0o600 });
}

/** writeSealedConfiguration off the event loop: for the workers that run beside the node's services. */
export async function writeSealedConfigurationAsync(path: string, sealed: SealedConfiguration): Promise<void> {
  await writeFileDurablyAsync(path, toBinary(SealedConfigurationSchema, sealed), { mode: 0o600 });
}
