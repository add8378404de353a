// The disk template: a sparse raw image with a GPT and four partitions
// (layout.ts draws them): the ESP, two system slots and DATA.
//
// The ESP is made in a separate file with mkfs.vfat -C, filled with mtools
// from a staged tree (the boot record and slot a's boot files), and copied
// into place (no loop devices, no root-only tooling); slot a's system image
// is copied into SYSTEM-A. Only non-zero chunks are written, so the image
// stays sparse. SYSTEM-B stays empty until the node's first update; DATA
// stays empty until the node formats it (LUKS2, ext4) at first boot.
// GUIDs, the volume id, mkfs.vfat's --invariant and the staged tree's fixed
// times (mcopy -m) make the template reproducible; launchers copy it per node.

import { closeSync, openSync, readdirSync, readSync, renameSync, rmSync, statSync, truncateSync, utimesSync, writeFileSync, writeSync } from "node:fs";
import { join } from "node:path";
import { ImageBuildError } from "./errors.ts";
import { run } from "./exec.ts";
import {
  DATA_PARTITION_GUID,
  DATA_PARTITION_NAME,
  DATA_PARTITION_NUMBER,
  DATA_TYPE_GUID,
  DISK_GUID,
  DISK_SIZE_BYTES,
  ESP_FS_LABEL,
  ESP_PARTITION_GUID,
  ESP_PARTITION_NAME,
  ESP_PARTITION_NUMBER,
  ESP_SIZE_BYTES,
  ESP_START_BYTES,
  ESP_TYPE_GUID,
  ESP_VOLUME_ID,
  PARTITION_ALIGN_BYTES,
  SECTOR_BYTES,
  SYSTEM_A_PARTITION_GUID,
  SYSTEM_A_PARTITION_NUMBER,
  SYSTEM_A_START_BYTES,
  SYSTEM_B_PARTITION_GUID,
  SYSTEM_B_PARTITION_NUMBER,
  SYSTEM_B_START_BYTES,
  SYSTEM_SLOT_SIZE_BYTES,
} from "./layout.ts";
import { SYSTEM_PARTITION_NAMES } from "../internal/localstorage/mod.ts";

/** Chunk size for copying the ESP: all-zero chunks are skipped (left sparse). */
const COPY_CHUNK_BYTES = 64 * 1024;
const KIB = 1024;
/** One sector per cluster: 64 MiB then has enough clusters (≥ 65525) to be FAT32. */
const ESP_SECTORS_PER_CLUSTER = 1;

export interface PartitionInfo {
  number: number;
  name: string;
  typeGuid: string;
  guid: string;
  startBytes: number;
  sizeBytes: number;
}

function sectors(bytes: number): number {
  return bytes / SECTOR_BYTES;
}

/** Writes src's non-zero chunks into the file at fd, starting at offset. */
function copySparse(src: string, fd: number, offset: number): void {
  const source = openSync(src, "r");
  const chunk = new Uint8Array(COPY_CHUNK_BYTES);
  try {
    for (let position = 0; ; position += COPY_CHUNK_BYTES) {
      const length = readSync(source, chunk, 0, COPY_CHUNK_BYTES, position);
      if (length === 0) break;
      const data = chunk.subarray(0, length);
      if (data.some((byte) => byte !== 0)) writeSync(fd, data, 0, length, offset + position);
    }
  } finally {
    closeSync(source);
  }
}

/** The FAT times of everything the template's ESP holds: 1980-01-01, FAT's first day. */
const FIXED_TIME = new Date("1980-01-01T00:00:00Z");

/** Gives every file and directory below dir (dir included) FIXED_TIME, so that mcopy -m copies the same bytes every build. */
function fixTimes(dir: string): void {
  for (const name of readdirSync(dir, { recursive: true, encoding: "utf8" })) utimesSync(join(dir, name), FIXED_TIME, FIXED_TIME);
  utimesSync(dir, FIXED_TIME, FIXED_TIME);
}

export interface DiskContents {
  /** A directory whose top-level entries are copied to the ESP's root (nodecore/: the boot record, slot a's files). */
  espTree: string;
  /** Slot a's system partition contents (system image and hash tree), copied to the start of SYSTEM-A. */
  systemA: string;
}

/** Builds the disk template at dest (atomically); espFile is scratch space for the ESP. */
export async function buildDisk(dest: string, espFile: string, contents: DiskContents): Promise<void> {
  if (statSync(contents.systemA).size > SYSTEM_SLOT_SIZE_BYTES) {
    throw new ImageBuildError(`the system partition contents (${contents.systemA}) are larger than a slot (${SYSTEM_SLOT_SIZE_BYTES} bytes)`);
  }
  const partial = `${dest}.partial`;
  rmSync(partial, { force: true });
  writeFileSync(partial, "");
  truncateSync(partial, DISK_SIZE_BYTES);

  const partition = (number: number, start: number, size: number, type: string, name: string, guid: string) => [
    `--new=${number}:${sectors(start)}:${sectors(start) + sectors(size) - 1}`,
    `--typecode=${number}:${type}`,
    `--change-name=${number}:${name}`,
    `--partition-guid=${number}:${guid}`,
  ];
  await run([
    "sgdisk",
    "--clear",
    `--set-alignment=${sectors(PARTITION_ALIGN_BYTES)}`,
    `--disk-guid=${DISK_GUID}`,
    ...partition(ESP_PARTITION_NUMBER, ESP_START_BYTES, ESP_SIZE_BYTES, ESP_TYPE_GUID, ESP_PARTITION_NAME, ESP_PARTITION_GUID),
    ...partition(SYSTEM_A_PARTITION_NUMBER, SYSTEM_A_START_BYTES, SYSTEM_SLOT_SIZE_BYTES, DATA_TYPE_GUID, SYSTEM_PARTITION_NAMES.a, SYSTEM_A_PARTITION_GUID),
    ...partition(SYSTEM_B_PARTITION_NUMBER, SYSTEM_B_START_BYTES, SYSTEM_SLOT_SIZE_BYTES, DATA_TYPE_GUID, SYSTEM_PARTITION_NAMES.b, SYSTEM_B_PARTITION_GUID),
    `--new=${DATA_PARTITION_NUMBER}:0:0`,
    `--typecode=${DATA_PARTITION_NUMBER}:${DATA_TYPE_GUID}`,
    `--change-name=${DATA_PARTITION_NUMBER}:${DATA_PARTITION_NAME}`,
    `--partition-guid=${DATA_PARTITION_NUMBER}:${DATA_PARTITION_GUID}`,
    partial,
  ]);

  rmSync(espFile, { force: true });
  await run([
    "mkfs.vfat",
    "-C",
    "-F",
    "32",
    "-S",
    String(SECTOR_BYTES),
    "-s",
    String(ESP_SECTORS_PER_CLUSTER),
    "-n",
    ESP_FS_LABEL,
    "-i",
    ESP_VOLUME_ID,
    "--invariant",
    espFile,
    String(ESP_SIZE_BYTES / KIB),
  ]);
  fixTimes(contents.espTree);
  const top = readdirSync(contents.espTree).map((name) => join(contents.espTree, name));
  if (top.length > 0) await run(["mcopy", "-s", "-m", "-i", espFile, ...top, "::/"], { env: { MTOOLS_SKIP_CHECK: "1" } });
  const fd = openSync(partial, "r+");
  try {
    copySparse(espFile, fd, ESP_START_BYTES);
    copySparse(contents.systemA, fd, SYSTEM_A_START_BYTES);
  } finally {
    closeSync(fd);
  }
  rmSync(espFile);

  const verify = await run(["sgdisk", "--verify", partial]);
  if (!verify.stdout.includes("No problems found")) throw new ImageBuildError(`disk template fails sgdisk --verify: ${verify.stdout.trim()}`);
  renameSync(partial, dest);
}

/** The partitions of a disk image, as sgdisk reads them back. */
export async function readPartitions(disk: string): Promise<PartitionInfo[]> {
  const partitions: PartitionInfo[] = [];
  for (const number of [ESP_PARTITION_NUMBER, DATA_PARTITION_NUMBER, SYSTEM_A_PARTITION_NUMBER, SYSTEM_B_PARTITION_NUMBER]) {
    const info = (await run(["sgdisk", `--info=${number}`, disk])).stdout;
    const field = (pattern: RegExp): string => {
      const value = pattern.exec(info)?.[1];
      if (value === undefined) throw new ImageBuildError(`could not read partition ${number} of ${disk}: no ${pattern.source} in sgdisk output`);
      return value;
    };
    const first = Number(field(/^First sector: (\d+)/m));
    const last = Number(field(/^Last sector: (\d+)/m));
    partitions.push({
      number,
      name: field(/^Partition name: '(.*)'$/m),
      typeGuid: field(/^Partition GUID code: (\S+)/m),
      guid: field(/^Partition unique GUID: (\S+)/m),
      startBytes: first * SECTOR_BYTES,
      sizeBytes: (last - first + 1) * SECTOR_BYTES,
    });
  }
  return partitions;
}
