// Writing an update bundle into the slot that is not booted.
//
//   begin    check the description (format, arch, version against this
//            node's, sizes against where each file goes); then forget the
//            target slot: its cmdline first (the slot choice can no longer load it),
//            its other ESP files and failure note, and a next that names it
//   write    the bytes, in BUNDLE_FILES order: system straight onto
//            SYSTEM-<S>, the rest into a staging directory on DATA (so the
//            ESP's lock is not held while they arrive); each file is hashed
//            as it comes and checked the moment it is complete
//   finish   every file complete and as described, or nothing more happens;
//            the system partition synced; under the ESP's lock the staged
//            files are copied in, cmdline last, each durably; then
//            next=<slot> in the boot record
//
// A power cut anywhere leaves the booted slot active and the target slot
// without a cmdline, which the slot choice will not boot: the update can simply be
// tried again. The booted slot is never written.

import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { join } from "node:path";
import { copyFileDurably, exclusively, findPartition, SYSTEM_PARTITION_NAMES, type Slot, type StorageLayout } from "../localstorage/mod.ts";
import { clearSlotFailure, otherSlot, readBootRecord, writeBootRecord } from "./boot_record.ts";
import { BUNDLE_FILES, BundleError, compareVersions, NODE_ARCH, type BundleFile, type BundleManifest } from "./bundle.ts";

export interface SlotWriterOptions {
  layout: StorageLayout;
  /** The slot this boot runs from: the other one is written. */
  booted: Slot;
  /** Whether this boot is an unconfirmed trial (its fallback must not be overwritten). */
  trial: boolean;
  /** This node's version. */
  currentVersion: string;
  allowDowngrade: boolean;
  /** The target slot's system partition (default: found by its GPT name), and its size. */
  systemDevice?: { path: string; bytes: number } | undefined;
}

/** The size of a block device (from sysfs) or a file. */
function deviceBytes(path: string): number {
  const name = path.split("/").at(-1)!;
  try {
    return Number(readFileSync(`/sys/class/block/${name}/size`, "utf8").trim()) * 512;
  } catch {
    return Bun.file(path).size;
  }
}

export interface WriteProgress {
  written: number;
  total: number;
  /** The file being written, or "done". */
  file: BundleFile | "done";
}

export class SlotWriter {
  private index = 0;
  private fileWritten = 0;
  private hasher = new Bun.CryptoHasher("sha256");
  private target: FileHandle | undefined;
  private writtenTotal = 0;
  private closed = false;

  private constructor(
    readonly slot: Slot,
    readonly manifest: BundleManifest,
    private readonly layout: StorageLayout,
    private readonly systemDevice: string,
    readonly total: number,
  ) {}

  /** Checks the bundle's description against this node and opens the other slot for writing; throws a BundleError before touching anything if it does not fit. */
  static async begin(manifest: BundleManifest, options: SlotWriterOptions): Promise<SlotWriter> {
    if (manifest.arch !== NODE_ARCH) throw new BundleError(`the bundle is for ${manifest.arch}; this node runs ${NODE_ARCH}`, "precondition");
    if (compareVersions(manifest.version, options.currentVersion) < 0 && !options.allowDowngrade) {
      throw new BundleError(`the bundle's version ${manifest.version} is older than this node's ${options.currentVersion} (allow a downgrade to install it)`, "precondition");
    }
    const record = readBootRecord(options.layout);
    if (options.trial && record.active !== options.booted) {
      throw new BundleError(`this node runs slot ${options.booted} as an unconfirmed trial; slot ${record.active} is its way back and is not overwritten until the trial is confirmed`, "precondition");
    }
    const slot = otherSlot(options.booted);
    const device = options.systemDevice ?? (() => {
      const partition = findPartition(SYSTEM_PARTITION_NAMES[slot]);
      if (!partition) throw new BundleError(`this node has no partition ${SYSTEM_PARTITION_NAMES[slot]} to write slot ${slot} to`, "precondition");
      return { path: partition.path, bytes: deviceBytes(partition.path) };
    })();
    if (manifest.files.system.bytes > device.bytes) throw new BundleError(`the bundle's system image is ${manifest.files.system.bytes} bytes; partition ${SYSTEM_PARTITION_NAMES[slot]} holds ${device.bytes}`, "precondition");
    const total = BUNDLE_FILES.reduce((sum, name) => sum + manifest.files[name].bytes, 0);

    // From here on the target slot is changed: first so that it cannot boot.
    const files = options.layout.esp.slot(slot);
    await exclusively(options.layout.esp.path, () => {
      if (record.next === slot) writeBootRecord(options.layout, { active: record.active, next: undefined });
      for (const path of [files.cmdline, files.kernel, files.initramfs, files.version]) rmSync(path, { force: true });
      clearSlotFailure(options.layout, slot);
    });
    rmSync(options.layout.data.updateStaging, { recursive: true, force: true });
    mkdirSync(options.layout.data.updateStaging, { recursive: true, mode: 0o700 });
    const writer = new SlotWriter(slot, manifest, options.layout, device.path, total);
    await writer.openCurrent();
    return writer;
  }

  get progress(): WriteProgress {
    return { written: this.writtenTotal, total: this.total, file: BUNDLE_FILES[this.index] ?? "done" };
  }

  private stagedPath(name: BundleFile): string {
    return join(this.layout.data.updateStaging, name);
  }

  private async openCurrent(): Promise<void> {
    const name = BUNDLE_FILES[this.index];
    if (name === undefined) return;
    this.target = name === "system" ? await open(this.systemDevice, "r+") : await open(this.stagedPath(name), "w", 0o600);
  }

  /** Takes the next bytes of the bundle (its files back to back, in BUNDLE_FILES order). */
  async write(chunk: Uint8Array): Promise<void> {
    if (this.closed) throw new BundleError("the update was already finished or abandoned");
    let offset = 0;
    while (offset < chunk.length) {
      const name = BUNDLE_FILES[this.index];
      if (name === undefined) throw new BundleError(`the bundle sent more than the ${this.total} bytes its description lists`);
      const info = this.manifest.files[name];
      const take = Math.min(info.bytes - this.fileWritten, chunk.length - offset);
      const part = chunk.subarray(offset, offset + take);
      await this.target!.write(part, 0, part.length, this.fileWritten);
      this.hasher.update(part);
      this.fileWritten += take;
      this.writtenTotal += take;
      offset += take;
      if (this.fileWritten === info.bytes) {
        const digest = this.hasher.digest("hex");
        await this.target!.sync();
        await this.target!.close();
        this.target = undefined;
        if (digest !== info.sha256) throw new BundleError(`the bundle's ${name} does not match its sha256 (got ${digest.slice(0, 12)}…, want ${info.sha256.slice(0, 12)}…): it was changed or damaged`);
        this.index++;
        this.fileWritten = 0;
        this.hasher = new Bun.CryptoHasher("sha256");
        await this.openCurrent();
      }
    }
  }

  /** Installs the checked files into the slot's ESP directory and makes the slot the one-shot next boot. */
  async finish(): Promise<void> {
    if (this.closed) throw new BundleError("the update was already finished or abandoned");
    if (this.index < BUNDLE_FILES.length) {
      throw new BundleError(`the bundle ended after ${this.writtenTotal} of ${this.total} bytes (in its ${BUNDLE_FILES[this.index]}): it is truncated`);
    }
    this.closed = true;
    const files = this.layout.esp.slot(this.slot);
    await exclusively(this.layout.esp.path, () => {
      mkdirSync(files.dir, { recursive: true });
      // cmdline last: until it is there, the slot choice cannot load the slot.
      for (const [name, dest] of [["version", files.version], ["kernel", files.kernel], ["initramfs", files.initramfs], ["cmdline", files.cmdline]] as const) {
        copyDurably(this.stagedPath(name), dest);
      }
      const record = readBootRecord(this.layout);
      writeBootRecord(this.layout, { active: record.active, next: this.slot });
    });
    rmSync(this.layout.data.updateStaging, { recursive: true, force: true });
  }

  /** Stops writing; the target slot stays unbootable (it has no cmdline). */
  async abort(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.target?.close().catch(() => {});
    this.target = undefined;
    rmSync(this.layout.data.updateStaging, { recursive: true, force: true });
  }
}

/** Copies a staged file onto the ESP durably (writeFileDurably's rule). */
function copyDurably(source: string, dest: string): void {
  if (!existsSync(source)) throw new BundleError(`the staged ${source} is missing`);
  copyFileDurably(source, dest);
}
