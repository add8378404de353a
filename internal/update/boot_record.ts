// The node's side of the boot record (internal/update/select.ts reads and clears
// it at every firmware boot) and of each slot's failure note.
//
//   /esp/nodecore/boot                "active=<slot>\n" [+ "next=<slot>\n"]
//   /esp/nodecore/slots/<s>/failed    JSON SlotFailure: why slot s last failed

import { existsSync, readFileSync, rmSync } from "node:fs";
import { SLOTS, writeFileDurably, type Slot, type StorageLayout } from "../localstorage/mod.ts";

export interface BootRecord {
  /** The slot known good: what boots unless next is set. */
  active: Slot;
  /** A one-shot trial: the slot choice clears it, then boots it once. */
  next: Slot | undefined;
}

function isSlot(value: string): value is Slot {
  return (SLOTS as readonly string[]).includes(value);
}

export function otherSlot(slot: Slot): Slot {
  return slot === "a" ? "b" : "a";
}

/** Reads the record as the slot choice always has: active defaults to a, bad lines are ignored. */
export function readBootRecord(layout: StorageLayout): BootRecord {
  const record: BootRecord = { active: "a", next: undefined };
  let text = "";
  try {
    text = readFileSync(layout.esp.boot, "utf8");
  } catch {
    return record;
  }
  for (const line of text.split("\n")) {
    const [key, value = ""] = line.trim().split("=", 2);
    if (key === "active" && isSlot(value)) record.active = value;
    if (key === "next" && isSlot(value)) record.next = value;
  }
  return record;
}

/** Replaces the record durably: a power cut leaves the old one or the new one. */
export function writeBootRecord(layout: StorageLayout, record: BootRecord): void {
  writeFileDurably(layout.esp.boot, `active=${record.active}\n${record.next && record.next !== record.active ? `next=${record.next}\n` : ""}`);
}

/** Why a slot failed to boot, as the node recorded it before it left the slot. */
export interface SlotFailure {
  slot: Slot;
  /** The slot's version, as its version file says. */
  version: string;
  reason: string;
  /** When (ms since the epoch, the node's clock then). */
  timeMs: number;
}

/** The version a slot's files say, or undefined if the slot holds no boot files. */
export function slotVersion(layout: StorageLayout, slot: Slot): string | undefined {
  const files = layout.esp.slot(slot);
  if (!existsSync(files.kernel) || !existsSync(files.initramfs) || !existsSync(files.cmdline)) return undefined;
  try {
    return readFileSync(files.version, "utf8").trim() || "unknown";
  } catch {
    return "unknown";
  }
}

export function readSlotFailure(layout: StorageLayout, slot: Slot): SlotFailure | undefined {
  try {
    const failure = JSON.parse(readFileSync(layout.esp.slot(slot).failed, "utf8")) as SlotFailure;
    return typeof failure.reason === "string" ? failure : undefined;
  } catch {
    return undefined;
  }
}

export function writeSlotFailure(layout: StorageLayout, failure: SlotFailure): void {
  writeFileDurably(layout.esp.slot(failure.slot).failed, JSON.stringify(failure) + "\n");
}

/** Forgets a slot's failure: its contents were replaced. */
export function clearSlotFailure(layout: StorageLayout, slot: Slot): void {
  rmSync(layout.esp.slot(slot).failed, { force: true });
}
