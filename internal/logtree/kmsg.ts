// Kernel messages into the log tree: /dev/kmsg, one record per read.
//
// A record is "<priority>,<sequence>,<microseconds since boot>,<flags>[,...];<text>"
// followed by continuation lines (" KEY=value") that we leave out. The
// priority's low three bits are the syslog severity.

import { open, read, readFileSync } from "node:fs";
import type { Level } from "../log/mod.ts";
import type { LogTree } from "./log_tree.ts";

/** The ring kernel messages go to. */
export const KERNEL_PATH = "kernel";
const KMSG = "/dev/kmsg";
/** A kmsg record is at most about 1 KiB; a read with a smaller buffer fails with EINVAL. */
const RECORD_BUFFER_BYTES = 8_192;

export interface KmsgRecord {
  level: Level;
  sequence: number;
  /** Microseconds since boot. */
  bootUs: number;
  message: string;
}

function levelOfSeverity(severity: number): Level {
  if (severity <= 3) return "error";
  if (severity === 4) return "warn";
  if (severity <= 6) return "info";
  return "debug";
}

/** Parses one /dev/kmsg record; undefined if it is not one. */
export function parseKmsgRecord(record: string): KmsgRecord | undefined {
  const semicolon = record.indexOf(";");
  if (semicolon < 0) return undefined;
  const [priority, sequence, bootUs] = record.slice(0, semicolon).split(",").map(Number);
  if (priority === undefined || sequence === undefined || bootUs === undefined || [priority, sequence, bootUs].some((n) => !Number.isInteger(n) || n < 0)) {
    return undefined;
  }
  const message = record.slice(semicolon + 1).split("\n")[0]!;
  return { level: levelOfSeverity(priority & 7), sequence, bootUs, message };
}

/**
 * Reads kernel messages into the tree for as long as the process lives,
 * starting with those the kernel still holds. Only PID 1 of a node VM calls
 * this: a node running as a process must not read its host's kernel log.
 * Reads block in the thread pool, one at a time.
 */
export function followKernelMessages(tree: LogTree, onError: (message: string) => void): void {
  // Records count microseconds since boot: wall-clock time of boot, from the uptime.
  let bootMs = Date.now();
  try {
    bootMs -= Number.parseFloat(readFileSync("/proc/uptime", "utf8").split(" ")[0]!) * 1000;
  } catch {
    // Without /proc, times are relative to now; the order is still right.
  }
  open(KMSG, "r", (err, fd) => {
    if (err) return onError(`cannot read kernel messages from ${KMSG}: ${err.message}`);
    const buffer = Buffer.alloc(RECORD_BUFFER_BYTES);
    const next = () =>
      read(fd, buffer, 0, buffer.length, null, (readErr, bytes) => {
        // EPIPE: records were overwritten before we read them; carry on with the next.
        if (readErr && (readErr as NodeJS.ErrnoException).code !== "EPIPE") return onError(`reading ${KMSG} failed: ${readErr.message}`);
        if (!readErr && bytes > 0) {
          const record = parseKmsgRecord(buffer.toString("utf8", 0, bytes));
          if (record) tree.append({ time: new Date(bootMs + record.bootUs / 1000), level: record.level, path: KERNEL_PATH, message: record.message });
        }
        next();
      });
    next();
  });
}
