// What node management may do with a node's slots: write an update into
// the other one, or boot the other one on purpose (rollback). Both end the
// same way: the other slot is the one-shot next boot, a trial that
// the node confirms only once it has rejoined (trial.ts).

import type { BootSelection, StorageLayout } from "../localstorage/mod.ts";
import { exclusively } from "../localstorage/mod.ts";
import { otherSlot, readBootRecord, readSlotFailure, slotVersion, writeBootRecord } from "./boot_record.ts";
import { BundleError, type BundleManifest } from "./bundle.ts";
import { SlotWriter } from "./install.ts";

export interface SlotControl {
  /** Checks the bundle against this node and opens the other slot for it (SlotWriter.begin). */
  beginUpdate(manifest: BundleManifest, allowDowngrade: boolean): Promise<SlotWriter>;
  /** Makes the other slot the next boot, once; what it is. */
  rollback(force: boolean): Promise<{ slot: string; version: string }>;
}

/** The system partitions: where the other slot's image goes and where the booted one's is (default: by GPT name); tests give files. */
export interface SystemDevices {
  target: { path: string; bytes: number };
  booted: string;
}

export function slotControl(layout: StorageLayout, selection: BootSelection, currentVersion: string, devices?: SystemDevices): SlotControl {
  return {
    beginUpdate: (manifest, allowDowngrade) =>
      SlotWriter.begin(manifest, {
        layout,
        booted: selection.slot,
        trial: selection.trial,
        currentVersion,
        allowDowngrade,
        ...(devices ? { systemDevice: devices.target, bootedSystemDevice: devices.booted } : {}),
      }),

    async rollback(force) {
      const other = otherSlot(selection.slot);
      const version = slotVersion(layout, other);
      if (version === undefined) throw new BundleError(`slot ${other} holds no system to roll back to (this node has not been updated yet)`, "precondition");
      const failure = readSlotFailure(layout, other);
      if (failure && !force) throw new BundleError(`slot ${other} (version ${version}) failed before: ${failure.reason} (force to boot it anyway)`, "precondition");
      await exclusively(layout.esp.path, () => {
        const record = readBootRecord(layout);
        writeBootRecord(layout, { active: record.active, next: other });
      });
      return { slot: other, version };
    },
  };
}
