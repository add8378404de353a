// The verified system image: the squashfs (system.ts) followed by its
// dm-verity hash tree, in one file that goes onto a system slot's
// partition as it is.
//
//   0                     hashOffset                    end
//   ├─ squashfs (4 KiB blocks) ─┼─ verity superblock + hash tree ─┤
//
// veritysetup format makes the tree with a fixed salt and UUID, so the same
// squashfs gives the same bytes and the same root hash. The root hash and
// the two numbers a node needs to open it travel in the slot's command line
// (SystemImageParameters below, parsed again by internal/localstorage):
// the partition itself is never trusted to say what it should contain.

import { closeSync, openSync, renameSync, rmSync, statSync } from "node:fs";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import { appendFileTo, formatSystemImageParameter, VERITY_BLOCK_BYTES, type SystemImageParameters } from "../internal/localstorage/mod.ts";

/** Fixed, so that builds are reproducible (a per-image salt adds nothing here: the image is public). */
const VERITY_SALT = "6e6f6465636f72652d73797374656d";
const VERITY_UUID = "6e6f6465-636f-7265-0000-000000000005";

/** Writes squashfs + hash tree to dest (atomically) and returns what a node needs to open it. */
export async function buildVerifiedImage(squashfs: string, dest: string): Promise<SystemImageParameters> {
  const dataBytes = statSync(squashfs).size;
  if (dataBytes === 0 || dataBytes % VERITY_BLOCK_BYTES !== 0) {
    throw new ImageBuildError(`${squashfs} is ${dataBytes} bytes, not a whole number of ${VERITY_BLOCK_BYTES}-byte blocks (mksquashfs pads to 4 KiB)`);
  }
  const hashFile = `${dest}.hash`;
  rmSync(hashFile, { force: true });
  const output = (
    await run(["veritysetup", "format", squashfs, hashFile, `--salt=${VERITY_SALT}`, `--uuid=${VERITY_UUID}`, `--data-block-size=${VERITY_BLOCK_BYTES}`, `--hash-block-size=${VERITY_BLOCK_BYTES}`])
  ).stdout;
  const rootHash = /^Root hash:\s+([0-9a-f]{64})$/m.exec(output)?.[1];
  if (!rootHash) throw new ImageBuildError(`veritysetup format printed no root hash:\n${output}`);
  const partial = `${dest}.partial`;
  const fd = openSync(partial, "w");
  try {
    appendFileTo(squashfs, fd);
    appendFileTo(hashFile, fd);
  } finally {
    closeSync(fd);
  }
  rmSync(hashFile, { force: true });
  renameSync(partial, dest);
  const parameters = { dataBlocks: dataBytes / VERITY_BLOCK_BYTES, hashOffset: dataBytes, rootHash };
  // The round trip a node will make: what is written is what parses.
  formatSystemImageParameter(parameters);
  return parameters;
}

/** Checks a verified image against its parameters on the host (veritysetup verify); throws naming the first bad block. */
export async function verifyImage(image: string, parameters: SystemImageParameters): Promise<void> {
  await run(["veritysetup", "verify", image, image, parameters.rootHash, `--hash-offset=${parameters.hashOffset}`, `--data-blocks=${parameters.dataBlocks}`]);
}
