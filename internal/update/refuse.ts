// What a node does when the slot it booted must not run: its system image
// failed verification. It leaves the slot for the other one if that one
// can boot, and otherwise stops, saying why.
//
//   booted slot s fails ──▶ other slot has boot files and no failure note?
//       yes ──▶ note s's failure, record active=other (no next), reboot
//       no  ──▶ halt with the reason (PID 1 shows it and stays up)
//
// A trial boot (the slot choice already cleared next, active is the old slot) and a
// boot of the active slot take the same path: either way the other slot
// becomes the one that boots. Two bad slots cannot make a reboot loop:
// the second finds the first's failure note and halts. Writing a slot
// (an update) clears its note.

import type { Slot, StorageLayout } from "../localstorage/mod.ts";
import { otherSlot, readBootRecord, readSlotFailure, slotVersion, writeBootRecord, writeSlotFailure } from "./boot_record.ts";

export type Refusal = { kind: "reboot"; to: Slot; version: string } | { kind: "halt"; why: string };

/** Records that slot `slot` failed for `reason` and decides where the node goes next. */
export function refuseBootedSlot(layout: StorageLayout, slot: Slot, reason: string, nowMs = Date.now()): Refusal {
  const version = slotVersion(layout, slot) ?? "unknown";
  const other = otherSlot(slot);
  const otherVersion = slotVersion(layout, other);
  const otherFailure = readSlotFailure(layout, other);
  try {
    writeSlotFailure(layout, { slot, version, reason, timeMs: nowMs });
  } catch {
    // The ESP may be what is broken; the decision below does not depend on the note.
  }
  if (otherVersion === undefined) return { kind: "halt", why: `slot ${slot} (version ${version}) cannot boot: ${reason}; slot ${other} holds no system to fall back to` };
  if (otherFailure) {
    return { kind: "halt", why: `slot ${slot} (version ${version}) cannot boot: ${reason}; slot ${other} (version ${otherVersion}) failed too: ${otherFailure.reason}` };
  }
  const record = readBootRecord(layout);
  writeBootRecord(layout, { active: other, next: record.next === slot ? undefined : record.next });
  return { kind: "reboot", to: other, version: otherVersion };
}
