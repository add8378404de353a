// Package update: the node's two system slots, A and B, and how a node
// moves between them.
//
//   ESP  nodecore/boot               the boot record: active=<slot> [next=<slot>]
//        nodecore/slots/<s>/         kernel, initramfs, cmdline (with the
//                                    system image's root hash), version, failed
//   SYSTEM-A, SYSTEM-B               each slot's system image + dm-verity tree
//
//   power on ─▶ firmware boots its fixed entry (slot a's build as installed)
//            ─▶ PID 1 (select.ts) ─▶ next set? clear it, boot next once
//                                    else boot active
//                 the chosen slot holds the running build? go on, else kexec it
//            ─▶ node init: open the slot's system image through dm-verity,
//               read it through (internal/localstorage/system_image.ts)
//                 ├─ matches ─▶ boot on
//                 └─ does not ─▶ refuseBootedSlot: note the failure, make
//                                the other slot active, reboot (or halt if
//                                the other slot cannot boot either)
//
// Invariants:
//  - A trial never boots twice: next is cleared before it boots.
//  - Only a node that runs a slot makes a slot active, and only a slot it has
//    booted and verified, or the other slot when the booted one is bad.
//  - Every record write is durable (write, fsync, rename, fsync the
//    directory), so a power cut leaves the old record or the new one.
//
// Writing the other slot from a streamed bundle (install.ts), the trial
// that makes it active once the node has rejoined (trial.ts), and rollback
// (control.ts) are the node's side of `ctl node update|rollback` and
// `ctl cluster update` (internal/operator; docs/updates.md).

export { readBootRecord, writeBootRecord, otherSlot, slotVersion, readSlotFailure, writeSlotFailure, clearSlotFailure, type BootRecord, type SlotFailure } from "./boot_record.ts";
export { refuseBootedSlot, type Refusal } from "./refuse.ts";
export { SlotWriter, type SlotWriterOptions, type WriteProgress } from "./install.ts";
export { slotControl, type SlotControl } from "./control.ts";
export { chooseBootSlot, kexecLoader, type BootChoice, type SlotLoader } from "./select.ts";
export { trialRunnable, settleEarlierTrial, TRIAL_BOUND_MS, type TrialOptions } from "./trial.ts";
export {
  BUNDLE_CHUNK_BYTES,
  BUNDLE_FILES,
  CHUNKED_FILES,
  BUNDLE_FORMAT,
  BUNDLE_MANIFEST,
  MAX_BUNDLE_FILE_BYTES,
  NODE_ARCH,
  VERSION_PATTERN,
  BundleError,
  compareVersions,
  parseBundleManifest,
  type BundleFile,
  type BundleFileInfo,
  type BundleManifest,
} from "./bundle.ts";
