// The disk template: a sparse raw image with a GPT and two partitions.
//
//   0        1 MiB                 65 MiB                              1 GiB
//   ├─ GPT ──┼─ 1 "ESP" (FAT32) ────┼─ 2 "DATA" (empty) ─────────────────┼─ backup GPT
//
// The ESP is made in a separate file with mkfs.vfat -C and copied into
// place (no loop devices, no root-only tooling); only its non-zero chunks are
// written, so the image stays sparse. DATA stays empty: the node formats it
// (LUKS2, ext4) at first boot. GUIDs, the volume id and mkfs.vfat's
// --invariant make the template reproducible; launchers copy it per node.

import { closeSync, openSync, readSync, renameSync, rmSync, truncateSync, writeFileSync, writeSync } from "node:fs";
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
} from "./layout.ts";

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

/** Builds the disk template at dest (atomically); espFile is scratch space for the ESP. */
export async function buildDisk(dest: string, espFile: string): Promise<void> {
  const partial = `${dest}.partial`;
  rmSync(partial, { force: true });
  writeFileSync(partial, "");
  truncateSync(partial, DISK_SIZE_BYTES);

  const espFirst = sectors(ESP_START_BYTES);
  const espLast = espFirst + sectors(ESP_SIZE_BYTES) - 1;
  await run([
    "sgdisk",
    "--clear",
    `--set-alignment=${sectors(PARTITION_ALIGN_BYTES)}`,
    `--disk-guid=${DISK_GUID}`,
    `--new=${ESP_PARTITION_NUMBER}:${espFirst}:${espLast}`,
    `--typecode=${ESP_PARTITION_NUMBER}:${ESP_TYPE_GUID}`,
    `--change-name=${ESP_PARTITION_NUMBER}:${ESP_PARTITION_NAME}`,
    `--partition-guid=${ESP_PARTITION_NUMBER}:${ESP_PARTITION_GUID}`,
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
  const fd = openSync(partial, "r+");
  try {
    copySparse(espFile, fd, ESP_START_BYTES);
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
  for (const number of [ESP_PARTITION_NUMBER, DATA_PARTITION_NUMBER]) {
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
