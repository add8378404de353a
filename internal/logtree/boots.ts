// The previous boots' logs: each ring's tail, kept on the data partition
// (encrypted with it), so that `ctl node logs <node> --boot -1` reads what
// a node logged before it rebooted, and why that boot ended.
//
//   boot N begins ─▶ rotate(): boot-0 (the boot before) ─▶ boot-1 ─▶ boot-2
//                    (BOOTS_KEPT); a boot-0 that recorded no end ended
//                    uncleanly: power loss, a panic (pstore says so) or a reset
//   every PERSIST_INTERVAL_MS ─▶ write(): header + the newest PER_PATH
//                    entries of each ring (the kernel's too), MAX_BYTES in
//                    all, written durably over boot-0
//   shutdown ─▶ write() once more, with the end: when, and why (the owner's
//                    reboot through node management, the power button, ...)
//
// One JSON object per line: the header, then entries. A line that does not
// parse (a torn write the rename did not prevent, a damaged disk) is
// skipped and counted, never fatal.

import { existsSync, readdirSync, readFileSync, renameSync } from "node:fs";
import { join } from "node:path";
import { writeFileDurably } from "../localstorage/mod.ts";
import type { Level } from "../log/mod.ts";
import type { LogTree, TreeEntry } from "./log_tree.ts";

/** Boots kept: this one and the ones before it. */
export const BOOTS_KEPT = 3;
/** How often the current boot's tail is written. */
export const PERSIST_INTERVAL_MS = 5_000;
/** The newest entries kept per ring. */
export const PER_PATH = 200;
/** The most one boot's file holds; beyond it, the oldest entries go. */
export const MAX_BYTES = 4 * 1024 * 1024;

export interface BootEnd {
  timeMs: number;
  /** Why the boot ended, in one line. */
  cause: string;
}

export interface BootHeader {
  /** When the boot began (ms since the epoch). */
  bootMs: number;
  version: string;
  /** Absent while the boot runs, and for one that ended without saying. */
  end?: BootEnd;
}

export interface PastBoot {
  header: BootHeader;
  entries: TreeEntry[];
  /** Lines that did not parse and were skipped. */
  skipped: number;
}

const fileOf = (dir: string, age: number) => join(dir, `boot-${age}.ndjson`);

/** Why a boot that recorded no end ended, as far as this one can tell. */
export function uncleanCause(pstore = "/sys/fs/pstore"): string {
  let records: string[] = [];
  try {
    records = readdirSync(pstore);
  } catch {
    // No pstore here: nothing more to tell.
  }
  return records.length > 0
    ? `no clean end was recorded; pstore holds ${records.length} record(s) of a crash (${records.slice(0, 3).join(", ")})`
    : "no clean end was recorded: power loss, a kernel panic, or a reset";
}

/**
 * At the start of a boot: the last boot's file becomes boot 1 (and the
 * older ones move up, the oldest going), given an end if it recorded none.
 * Returns the last boot's header, if there was one.
 */
export function rotateBoots(dir: string, cause: () => string = uncleanCause): BootHeader | undefined {
  const last = readBoot(dir, 0);
  for (let age = BOOTS_KEPT - 2; age >= 0; age--) {
    if (existsSync(fileOf(dir, age))) renameSync(fileOf(dir, age), fileOf(dir, age + 1));
  }
  if (!last) return undefined;
  if (last.header.end) return last.header;
  // The end it never wrote, written for it (its time: its last entry's).
  const end: BootEnd = { timeMs: last.entries.at(-1)?.time.getTime() ?? last.header.bootMs, cause: cause() };
  const header = { ...last.header, end };
  writeBoot(fileOf(dir, 1), header, last.entries);
  return header;
}

/** Writes the current boot's tail (and its end, at shutdown) over boot 0. */
export function persistBoot(dir: string, tree: LogTree, header: BootHeader): void {
  const entries: TreeEntry[] = [];
  for (const path of tree.paths()) entries.push(...tree.backlog({ path, subtree: false }, PER_PATH));
  entries.sort((a, b) => a.seq - b.seq);
  writeBoot(fileOf(dir, 0), header, entries);
}

function writeBoot(file: string, header: BootHeader, entries: readonly TreeEntry[]): void {
  const lines = entries.map((e) => JSON.stringify({ t: e.time.getTime(), l: e.level, p: e.path, m: e.message, f: e.fields }));
  // The newest stay within MAX_BYTES.
  let bytes = 0;
  let first = lines.length;
  while (first > 0 && bytes + lines[first - 1]!.length + 1 <= MAX_BYTES) bytes += lines[--first]!.length + 1;
  writeFileDurably(file, `${JSON.stringify({ header })}\n${lines.slice(first).join("\n")}\n`);
}

const LEVELS = new Set<Level>(["debug", "info", "warn", "error"]);

/** Boot `age` (0: the last one written, 1: the one before, ...), or undefined if none is kept. */
export function readBoot(dir: string, age: number): PastBoot | undefined {
  const file = fileOf(dir, age);
  if (!existsSync(file)) return undefined;
  const lines = readFileSync(file, "utf8").split("\n");
  let header: BootHeader | undefined;
  const entries: TreeEntry[] = [];
  let skipped = 0;
  for (const [i, line] of lines.entries()) {
    if (!line) continue;
    try {
      const value = JSON.parse(line);
      if (i === 0 && value?.header && typeof value.header.bootMs === "number") {
        header = {
          bootMs: value.header.bootMs,
          version: String(value.header.version ?? ""),
          ...(value.header.end ? { end: { timeMs: Number(value.header.end.timeMs), cause: String(value.header.end.cause) } } : {}),
        };
        continue;
      }
      if (typeof value?.t !== "number" || !LEVELS.has(value.l) || typeof value.p !== "string" || typeof value.m !== "string" || !Array.isArray(value.f)) throw new Error("not an entry");
      entries.push({
        seq: entries.length + 1,
        time: new Date(value.t),
        level: value.l,
        path: value.p,
        message: value.m,
        fields: value.f.filter((f: unknown) => Array.isArray(f) && f.length === 2).map(([k, v]: [unknown, unknown]) => [String(k), String(v)]),
      });
    } catch {
      skipped++;
    }
  }
  return { header: header ?? { bootMs: entries[0]?.time.getTime() ?? 0, version: "" }, entries, skipped };
}
