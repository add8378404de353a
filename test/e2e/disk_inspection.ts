// Looking at a powered-off node's disk copy from the host: where its DATA
// partition is (from the disk's own GPT, via sgdisk), what its LUKS2 header
// says, and whether plaintext shows through.
//
//   DATA partition:  0 ─ LUKS2 binary header ("LUKS\xba\xbe", version 2, hdr_size)
//                    4096 ─ JSON metadata (segments."0".offset = where ciphertext starts)
//                    segment offset ─ encrypted ext4 (its superblock magic must not show)

import { closeSync, openSync, readSync, writeSync } from "node:fs";
import { runHostCommand } from "../launch/mod.ts";

export const LUKS_MAGIC = Buffer.from([0x4c, 0x55, 0x4b, 0x53, 0xba, 0xbe]); // "LUKS\xba\xbe"
const LUKS2_VERSION = 2;
const LUKS2_BINARY_HEADER_BYTES = 4096;
/** ext4's superblock is 1024 bytes in; its magic 0xEF53 (little-endian) 56 bytes into it. */
export const EXT4_MAGIC_OFFSET = 1024 + 56;
const EXT4_MAGIC = Buffer.from([0x53, 0xef]);
const SCAN_CHUNK_BYTES = 16 * 1024 * 1024;
const SECTOR_BYTES = 512;

export interface PartitionExtent {
  name: string;
  startBytes: number;
  sizeBytes: number;
}

/** A partition's extent and name from the disk image's GPT. */
export async function partitionExtent(disk: string, number: number): Promise<PartitionExtent> {
  const { stdout } = await runHostCommand(["sgdisk", "-i", String(number), disk]);
  const first = /^First sector: (\d+)/m.exec(stdout);
  const last = /^Last sector: (\d+)/m.exec(stdout);
  const name = /^Partition name: '(.*)'/m.exec(stdout);
  if (!first || !last || !name) throw new Error(`sgdisk -i ${number} ${disk} did not describe a partition:\n${stdout}`);
  const start = Number(first[1]);
  return { name: name[1]!, startBytes: start * SECTOR_BYTES, sizeBytes: (Number(last[1]) - start + 1) * SECTOR_BYTES };
}

export function readAt(path: string, offset: number, length: number): Buffer {
  const fd = openSync(path, "r");
  try {
    const buffer = Buffer.alloc(length);
    const read = readSync(fd, buffer, 0, length, offset);
    return buffer.subarray(0, read);
  } finally {
    closeSync(fd);
  }
}

/** Inverts the lowest bit of one byte of a file in place (a disk image: a tampered or failing sector). */
export function flipByte(path: string, offset: number): void {
  const fd = openSync(path, "r+");
  try {
    const byte = Buffer.alloc(1);
    if (readSync(fd, byte, 0, 1, offset) !== 1) throw new Error(`${path} has no byte at ${offset}`);
    byte[0] = byte[0]! ^ 0x01;
    writeSync(fd, byte, 0, 1, offset);
  } finally {
    closeSync(fd);
  }
}

export interface Luks2Header {
  version: number;
  /** Where the encrypted payload begins, relative to the partition. */
  segmentOffsetBytes: number;
  cipher: string;
  /** How many key slots it has: none after a crypto-erase. */
  keyslots: number;
}

/** Parses the LUKS2 header at the partition's start; throws if there is none. */
export function readLuks2Header(disk: string, partition: PartitionExtent): Luks2Header {
  const binary = readAt(disk, partition.startBytes, LUKS2_BINARY_HEADER_BYTES);
  if (!binary.subarray(0, LUKS_MAGIC.length).equals(LUKS_MAGIC)) {
    throw new Error(`no LUKS magic at the start of partition ${partition.name} (offset ${partition.startBytes}): found ${binary.subarray(0, 6).toString("hex")}`);
  }
  const version = binary.readUInt16BE(6);
  const headerBytes = Number(binary.readBigUInt64BE(8));
  const jsonArea = readAt(disk, partition.startBytes + LUKS2_BINARY_HEADER_BYTES, headerBytes - LUKS2_BINARY_HEADER_BYTES);
  const end = jsonArea.indexOf(0);
  const metadata = JSON.parse(jsonArea.subarray(0, end < 0 ? undefined : end).toString("utf8")) as {
    segments: Record<string, { offset: string; encryption: string }>;
    keyslots?: Record<string, unknown>;
  };
  const segment = metadata.segments["0"];
  if (!segment) throw new Error(`LUKS2 header of partition ${partition.name} has no segment 0`);
  return { version, segmentOffsetBytes: Number(segment.offset), cipher: segment.encryption, keyslots: Object.keys(metadata.keyslots ?? {}).length };
}

export function isLuks2(header: Luks2Header): boolean {
  return header.version === LUKS2_VERSION;
}

/** Whether an ext4 superblock magic sits at a file system start `offset` bytes into the disk. */
export function hasExt4Magic(disk: string, offset: number): boolean {
  return readAt(disk, offset + EXT4_MAGIC_OFFSET, EXT4_MAGIC.length).equals(EXT4_MAGIC);
}

/** Whether `needle` occurs anywhere in the partition, read in chunks (the copy is sparse, so this is quick). */
export function partitionContains(disk: string, partition: PartitionExtent, needle: Buffer): boolean {
  const fd = openSync(disk, "r");
  try {
    const buffer = Buffer.alloc(SCAN_CHUNK_BYTES + needle.length);
    const end = partition.startBytes + partition.sizeBytes;
    // Chunks overlap by the needle's length so that no match is split.
    for (let offset = partition.startBytes; offset < end; offset += SCAN_CHUNK_BYTES) {
      const length = Math.min(buffer.length, end - offset);
      const read = readSync(fd, buffer, 0, length, offset);
      if (buffer.subarray(0, read).includes(needle)) return true;
    }
    return false;
  } finally {
    closeSync(fd);
  }
}
