// Writing the sealed configuration to the ESP, atomically.

import { toBinary } from "@bufbuild/protobuf";
import { mkdirSync, renameSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import { SealedConfigurationSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";

/** Writes to a temporary file and renames it, so a crash never leaves half a file. */
export function writeSealedConfiguration(path: string, sealed: SealedConfiguration): void {
  mkdirSync(dirname(path), { recursive: true });
  const temporary = `${path}.new`;
  writeFileSync(temporary, toBinary(SealedConfigurationSchema, sealed), { mode: 0o600 });
  renameSync(temporary, path);
}
