// Which slot a node boots, decided by PID 1 itself before anything else
// runs. The firmware (on qemu: -kernel/-initrd/-append) boots one fixed
// build, the one the disk was installed with; its command line names that
// build (nodecore.build=, a digest of the slot's kernel, initramfs, system
// image root hash and version, image/mod.ts). PID 1 reads the record:
//
//   next set ──▶ rewrite the record without next (durably), then boot next
//                once, as a trial (nodecore.trial=1)
//   otherwise ──▶ boot active
//
//   the chosen slot holds this very build ──▶ go on: no second kernel
//   it holds another ──▶ kexec its kernel and initramfs with its command
//                        line and nodecore.slot=<s> (the kexec'd node sees
//                        nodecore.slot= and does not decide again)
//   it cannot be loaded ──▶ the other slot, never as a trial; if neither
//                           can, halt and say why
//
// So a node that was never updated pays nothing for having slots, and an
// updated one pays one kexec per boot (kexec_file_load digests about 90 MiB:
// 6 s under emulation, docs/updates.md). Metropolis's abloader keeps the
// same one-shot rule in an EFI variable; here it is a file on the ESP, so
// that the node can write it with nothing but the ESP. The node, never this
// decision, makes a slot active (trial.ts, refuse.ts).

import { openSync, closeSync, readFileSync } from "node:fs";
import { BUILD_PARAMETER, commandLineParameters, readBootSelection, SLOT_PARAMETER, TRIAL_PARAMETER, type BootSelection, type Slot, type StorageLayout } from "../localstorage/mod.ts";
import { otherSlot, readBootRecord, slotVersion, writeBootRecord } from "./boot_record.ts";

/** What PID 1 does with this boot. */
export type BootChoice =
  /** The chosen slot is the build that is running: go on with this selection. */
  | { kind: "this"; selection: BootSelection; version: string; note?: string }
  /** The chosen slot's kernel is loaded: start it (reboot "kexec"). */
  | { kind: "loaded"; slot: Slot; trial: boolean; version: string; note?: string }
  /** Neither slot can boot. */
  | { kind: "halt"; why: string };

/** Loads a slot's kernel, initramfs and command line for kexec; throws with the reason it cannot. */
export type SlotLoader = (kernel: string, initramfs: string, cmdline: string) => void;

function slotCmdline(layout: StorageLayout, slot: Slot): string {
  return readFileSync(layout.esp.slot(slot).cmdline, "utf8").trim();
}

/** The command line a slot boots with: its own, naming the slot and whether it is a trial. */
function withSlot(cmdline: string, slot: Slot, trial: boolean): string {
  return `${cmdline} ${SLOT_PARAMETER}=${slot}${trial ? ` ${TRIAL_PARAMETER}=1` : ""}`;
}

/** Whether `slot` holds the build that is running (its command line names the same nodecore.build). */
function holdsThisBuild(layout: StorageLayout, slot: Slot, running: string): boolean {
  const ours = commandLineParameters(running).get(BUILD_PARAMETER);
  if (ours === undefined) return false;
  try {
    return commandLineParameters(slotCmdline(layout, slot)).get(BUILD_PARAMETER) === ours;
  } catch {
    return false;
  }
}

/** Reads the slot's boot files and hands them to `load`; throws naming what failed. */
function loadSlot(layout: StorageLayout, slot: Slot, trial: boolean, load: SlotLoader): void {
  const files = layout.esp.slot(slot);
  let cmdline: string;
  try {
    cmdline = slotCmdline(layout, slot);
  } catch (err) {
    throw new Error(`its command line: ${(err as Error).message}`);
  }
  if (!cmdline) throw new Error("its command line is empty");
  load(files.kernel, files.initramfs, withSlot(cmdline, slot, trial));
}

/**
 * Decides this boot's slot from the record (clearing a one-shot next first),
 * and either goes on with the running build or loads the chosen slot for
 * kexec through `load`.
 */
export function chooseBootSlot(layout: StorageLayout, running: string, load: SlotLoader): BootChoice {
  const record = readBootRecord(layout);
  let slot = record.active;
  let trial = false;
  let note: string | undefined;
  if (record.next !== undefined && record.next !== record.active) {
    try {
      writeBootRecord(layout, { active: record.active, next: undefined });
      slot = record.next;
      trial = true;
    } catch (err) {
      note = `could not clear the one-shot slot ${record.next} (${(err as Error).message}); booting the active slot ${record.active}`;
    }
  }
  const attempt = (s: Slot, asTrial: boolean): BootChoice | string => {
    const version = slotVersion(layout, s) ?? "unknown";
    if (holdsThisBuild(layout, s, running)) {
      const selection = readBootSelection(withSlot(running, s, asTrial));
      if (selection) return { kind: "this", selection, version, ...(note ? { note } : {}) };
    }
    try {
      loadSlot(layout, s, asTrial, load);
      return { kind: "loaded", slot: s, trial: asTrial, version, ...(note ? { note } : {}) };
    } catch (err) {
      return `slot ${s} (version ${version}) cannot boot: ${(err as Error).message}`;
    }
  };
  const first = attempt(slot, trial);
  if (typeof first !== "string") return first;
  note = `${first}; trying slot ${otherSlot(slot)}`;
  const second = attempt(otherSlot(slot), false);
  if (typeof second !== "string") return second;
  return { kind: "halt", why: `${first}, and ${second}` };
}

/** The loader PID 1 uses: kexec_file_load on the slot's files. */
export function kexecLoader(loadFiles: (kernelFd: number, initramfsFd: number, cmdline: string) => void): SlotLoader {
  return (kernel, initramfs, cmdline) => {
    const kernelFd = openSync(kernel, "r");
    try {
      const initramfsFd = openSync(initramfs, "r");
      try {
        loadFiles(kernelFd, initramfsFd, cmdline);
      } finally {
        closeSync(initramfsFd);
      }
    } finally {
      closeSync(kernelFd);
    }
  };
}
