// Where the node keeps its data: the encrypted data partition on a VM, or a
// plain directory when the node core runs as a process (tests, development).

import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { DATA_MAPPER_NAME, StorageError, mountDataPartition, type DataMountResult, type StorageLayout, writeFileDurably } from "../localstorage/mod.ts";
import type { Logger } from "../log/mod.ts";
import { runCommand } from "../supervisor/mod.ts";

export interface DataStorage {
  /** Unlocks the node's data with `key` (formatting it on first use) and mounts it. */
  open(key: Uint8Array, logger: Logger, signal: AbortSignal): Promise<DataMountResult>;
  /** Whether `key` opens the node's data, without opening it (a backup's proof). */
  opens?(key: Uint8Array): Promise<boolean>;
  /** Makes the data unopenable for good (a reset's wipe); says what it did. */
  erase?(): Promise<string>;
}

/** The data partition: LUKS2 + ext4 on the disk's DATA partition. */
export function encryptedPartition(layout: StorageLayout, device: () => string): DataStorage {
  return {
    open: (key, logger, signal) =>
      mountDataPartition({
        device: device(),
        mountpoint: layout.data.path,
        mapperName: DATA_MAPPER_NAME,
        key,
        formattedMarker: layout.data.formatted,
        logger,
        signal,
      }),
    // Every key slot goes: without one, no key opens the volume again (the
    // mapping open now keeps working until the node reboots).
    erase: async () => {
      await runCommand(["cryptsetup", "luksErase", "--batch-mode", device()]);
      return `the data partition's key slots: destroyed (${device()})`;
    },
    // LUKS tries the key against every key slot and opens nothing.
    opens: (key) =>
      runCommand(["cryptsetup", "open", "--test-passphrase", "--type", "luks2", "--key-file", "-", device()], { stdin: key }).then(
        () => true,
        () => false,
      ),
  };
}

/**
 * A plain directory standing in for the data partition when the node runs
 * as a process. Not encrypted; it remembers a hash of the key so that a
 * wrong key is refused just as the real partition refuses it.
 */
export function plainDirectory(layout: StorageLayout): DataStorage {
  const check = join(layout.data.path, ".nodecore-key-check");
  const digestOf = (key: Uint8Array) => createHash("sha256").update("nodecore key check").update(key).digest("hex");
  return {
    async opens(key) {
      return existsSync(check) && readFileSync(check, "utf8").trim() === digestOf(key);
    },
    // The stand-in's "key slot" is its key check: without it no key is taken, and the directory is set up anew.
    async erase() {
      rmSync(check, { force: true });
      rmSync(layout.data.formatted, { force: true });
      return `the data directory's key check: deleted (${check}; a node process's data is not encrypted)`;
    },
    async open(key, logger) {
      const digest = digestOf(key);
      mkdirSync(layout.data.path, { recursive: true, mode: 0o700 });
      if (existsSync(check)) {
        if (readFileSync(check, "utf8").trim() !== digest) {
          throw new StorageError(`data directory ${layout.data.path} was set up with another key (wrong key); leaving it untouched`);
        }
        logger.info("data directory opened (process mode: not encrypted)", { path: layout.data.path });
        return "mounted";
      }
      writeFileDurably(check, digest + "\n");
      writeFileDurably(layout.data.formatted, `${new Date().toISOString()}\n`);
      logger.warn("data directory created (process mode: not encrypted)", { path: layout.data.path });
      return "formatted";
    },
  };
}
