// The trial: a boot that the slot choice took from `next`, once. The node makes it
// the active slot only when it has rejoined its cluster at this version:
// its status, with this version in it, was accepted by a curator. That is
// Metropolis's rule for a good update.
//
//   trial boot of slot s ──▶ note slots/<s>/trial {version, since}
//       rejoined within the bound ──▶ active=s, the note and any old
//                                     failure of s cleared ("confirmed")
//       not within the bound ──────▶ failure noted for s, reboot: the slot choice
//                                     boots the old active slot
//       crash, panic, power cut ───▶ (nothing runs here) the slot choice boots the
//                                     old active slot at the next start
//
//   any boot, before the node core starts (settleEarlierTrial, from PID 1's
//   start-up) ──▶ the other slot's trial note left behind? Its trial ended
//                 without being confirmed: turn it into that slot's failure
//                 (unless the trial noted a better reason itself)
//
// The failure stays on the ESP (slots/<s>/failed) until the slot is written
// again; the node's status reports it. The failed boot's logs are the
// node's previous boot's (`ctl node logs --boot -1`), kept on DATA if the
// trial got as far as opening it.

import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { exclusively, writeFileDurably, type BootSelection, type StorageLayout } from "../localstorage/mod.ts";
import { sleep, type Runnable } from "../supervisor/mod.ts";
import { clearSlotFailure, otherSlot, readBootRecord, readSlotFailure, slotVersion, writeBootRecord, writeSlotFailure } from "./boot_record.ts";
import type { Slot } from "../localstorage/mod.ts";

/** How long a trial boot has to rejoin: well past a slow boot under emulation (about 1 min), short enough that a bad version is not kept waiting for. */
export const TRIAL_BOUND_MS = 180_000;

interface TrialNote {
  version: string;
  sinceMs: number;
}

function trialNotePath(layout: StorageLayout, slot: Slot): string {
  return join(layout.esp.slot(slot).dir, "trial");
}

function readTrialNote(layout: StorageLayout, slot: Slot): TrialNote | undefined {
  const path = trialNotePath(layout, slot);
  if (!existsSync(path)) return undefined;
  try {
    const note = JSON.parse(readFileSync(path, "utf8")) as TrialNote;
    return { version: typeof note.version === "string" ? note.version.slice(0, 64) : "unknown", sinceMs: Number(note.sinceMs) || 0 };
  } catch {
    return { version: "unknown", sinceMs: 0 };
  }
}

export interface TrialOptions {
  layout: StorageLayout;
  selection: BootSelection;
  /** This boot's version. */
  version: string;
  /** Resolves once a curator has accepted this node's status at `version`. */
  rejoined: (signal: AbortSignal) => Promise<void>;
  /** Reboots the node the orderly way. */
  reboot: (why: string) => void;
  boundMs?: number;
}

/** Settles what an earlier trial left behind; returns the other slot's failure, if it has one. */
export async function settleEarlierTrial(layout: StorageLayout, booted: Slot, nowMs = Date.now()): Promise<{ slot: Slot; settled: boolean }> {
  const other = otherSlot(booted);
  const note = readTrialNote(layout, other);
  if (!note) return { slot: other, settled: false };
  await exclusively(layout.esp.path, () => {
    if (!readSlotFailure(layout, other)) {
      writeSlotFailure(layout, {
        slot: other,
        version: note.version,
        reason: `its trial boot ended before the node rejoined its cluster (a crash, a hang or a power cut); the node came back on slot ${booted}`,
        timeMs: nowMs,
      });
    }
    rmSync(trialNotePath(layout, other), { force: true });
  });
  return { slot: other, settled: true };
}

export function trialRunnable(options: TrialOptions): Runnable {
  const { layout, selection } = options;
  const bound = options.boundMs ?? (selection.trialBoundS !== undefined ? selection.trialBoundS * 1000 : TRIAL_BOUND_MS);
  return async (ctx) => {
    const record = readBootRecord(layout);
    if (!selection.trial || record.active === selection.slot) {
      ctx.signalHealthy();
      ctx.signalDone();
      return;
    }
    const slot = selection.slot;
    await exclusively(layout.esp.path, () => writeFileDurably(trialNotePath(layout, slot), JSON.stringify({ version: options.version, sinceMs: Date.now() } satisfies TrialNote) + "\n"));
    ctx.logger.info(`this boot is a trial of slot ${slot} (version ${options.version}): it becomes the active slot once the node has rejoined its cluster, within ${Math.round(bound / 1000)} s`);
    ctx.signalHealthy();
    // Whichever comes first ends the other.
    const settled = new AbortController();
    const signal = AbortSignal.any([ctx.signal, settled.signal]);
    const rejoined = await Promise.race([
      options.rejoined(signal).then(
        () => true,
        () => false,
      ),
      sleep(bound, signal).then(
        () => false,
        () => false,
      ),
    ]);
    settled.abort();
    ctx.signal.throwIfAborted();
    if (rejoined) {
      await exclusively(layout.esp.path, () => {
        const now = readBootRecord(layout);
        writeBootRecord(layout, { active: slot, next: now.next === slot ? undefined : now.next });
        clearSlotFailure(layout, slot);
        rmSync(trialNotePath(layout, slot), { force: true });
      });
      ctx.logger.info(`slot ${slot} (version ${options.version}) confirmed: the node rejoined its cluster, and slot ${slot} is the active slot now`, {
        previous: `${otherSlot(slot)} (${slotVersion(layout, otherSlot(slot)) ?? "none"})`,
      });
      ctx.signalDone();
      return;
    }
    const reason = `did not rejoin its cluster within ${Math.round(bound / 1000)} s of booting`;
    await exclusively(layout.esp.path, () => {
      writeSlotFailure(layout, { slot, version: options.version, reason, timeMs: Date.now() });
      rmSync(trialNotePath(layout, slot), { force: true });
    });
    ctx.logger.error(`the trial of slot ${slot} (version ${options.version}) failed: it ${reason}; rebooting into slot ${record.active}`);
    options.reboot(`the trial of slot ${slot} (version ${options.version}) ${reason}`);
    ctx.signalDone();
  };
}
