// Writing an update bundle into the slot that is not booted.
//
//   begin    check the description (format, arch, version against this
//            node's, sizes against where each file goes); then forget the
//            target slot: its cmdline first (the slot choice can no longer load it),
//            its other ESP files and failure note, and a next that names it
//   take     every file the booted slot holds as well (same size, same
//            sha256) is copied from there, hashed as it is copied: an
//            update that changes only the init sends only the init; of a
//            file whose chunks the bundle lists (the initramfs), the MiBs
//            from its start that the booted copy has alike are copied, and
//            the stream carries the file from the first one that differs
//   write    the other files' bytes, in BUNDLE_FILES order: system straight onto
//            SYSTEM-<S>, the rest as <name>.tmp in the slot's ESP directory,
//            each write under the ESP's lock (a scrub holds the ESP full
//            under it); each file is hashed as it comes, synced, and
//            checked the moment it is complete
//   finish   every file complete and as described, or nothing more happens;
//            under the ESP's lock each .tmp is renamed over its name,
//            durably, cmdline last; then next=<slot> in the boot record
//
// The ESP holds both slots' files by design, so an update needs no room
// anywhere else: staging them on DATA once failed with ENOSPC on a busy
// controller, and wrote every byte twice.
//
// A power cut anywhere leaves the booted slot active and the target slot
// without a cmdline, which the slot choice will not boot: the update can simply be
// tried again. The booted slot is never written.

import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { describeSpace, exclusively, findPartition, freeSpace, replaceDurably, SYSTEM_PARTITION_NAMES, type Slot, type StorageLayout } from "../localstorage/mod.ts";
import { formatBytes } from "../log/mod.ts";
import { clearSlotFailure, otherSlot, readBootRecord, writeBootRecord } from "./boot_record.ts";
import { BUNDLE_CHUNK_BYTES, BUNDLE_FILES, BundleError, compareVersions, NODE_ARCH, type BundleFile, type BundleFileInfo, type BundleManifest } from "./bundle.ts";

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
  /** The booted slot's system partition, where an unchanged system image is copied from (default: found by its GPT name). */
  bootedSystemDevice?: string | undefined;
}

/** Bytes per read when a file is copied from the booted slot. */
const TAKE_CHUNK_BYTES = 4 * 1024 * 1024;

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
  /** The files still to arrive in the stream, in order; all of them until takeFromBootedSlot has run. */
  private pending: BundleFile[] = [...BUNDLE_FILES];
  /** The files copied from the booted slot instead. */
  readonly taken: BundleFile[] = [];
  /** Files of which a start was copied from the booted slot: where the stream takes over, and the file's hash so far. */
  private readonly resumeAt = new Map<BundleFile, { offset: number; hasher: Bun.CryptoHasher }>();
  private streamed = false;
  private tookFromBooted = false;
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
    private readonly bootedSystemDevice: string | undefined,
    private readonly booted: Slot,
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
    const device =
      options.systemDevice ??
      (() => {
        const partition = findPartition(SYSTEM_PARTITION_NAMES[slot]);
        if (!partition) throw new BundleError(`this node has no partition ${SYSTEM_PARTITION_NAMES[slot]} to write slot ${slot} to`, "precondition");
        return { path: partition.path, bytes: deviceBytes(partition.path) };
      })();
    if (manifest.files.system.bytes > device.bytes)
      throw new BundleError(`the bundle's system image is ${manifest.files.system.bytes} bytes; partition ${SYSTEM_PARTITION_NAMES[slot]} holds ${device.bytes}`, "precondition");
    const total = BUNDLE_FILES.reduce((sum, name) => sum + manifest.files[name].bytes, 0);
    // The slot's ESP files replace what the slot holds there now. What an
    // interrupted update left goes first: it is never booted, and after a
    // power cut its size may not say what it holds.
    const files = options.layout.esp.slot(slot);
    await exclusively(options.layout.esp.path, () => {
      for (const name of ESP_FILES) rmSync(temporaryOf(files[name]), { force: true });
    });
    const needed = ESP_FILES.reduce((sum, name) => sum + manifest.files[name].bytes, 0);
    const space = freeSpace(options.layout.esp.path);
    const freed = ESP_FILES.reduce((sum, name) => sum + (existsSync(files[name]) ? Bun.file(files[name]).size : 0), 0);
    if (space.freeBytes + freed < needed + ESP_HEADROOM_BYTES) {
      throw new BundleError(
        `the slot's boot files need ${formatBytes(needed)} on the ESP, which has ${describeSpace(space)} (${formatBytes(freed)} more once slot ${slot}'s old files go)`,
        "precondition",
      );
    }

    // From here on the target slot is changed: first so that it cannot boot.
    await exclusively(options.layout.esp.path, () => {
      if (record.next === slot) writeBootRecord(options.layout, { active: record.active, next: undefined });
      for (const path of [files.cmdline, files.kernel, files.initramfs, files.version]) rmSync(path, { force: true });
      clearSlotFailure(options.layout, slot);
      mkdirSync(files.dir, { recursive: true });
    });
    const bootedSystem = options.bootedSystemDevice ?? findPartition(SYSTEM_PARTITION_NAMES[options.booted])?.path;
    return new SlotWriter(slot, manifest, options.layout, device.path, bootedSystem, options.booted, total);
  }

  get progress(): WriteProgress {
    return { written: this.writtenTotal, total: this.total, file: this.pending[this.index] ?? "done" };
  }

  /** The files the stream must still carry, in order (after takeFromBootedSlot, only those the booted slot did not have). */
  get toReceive(): readonly BundleFile[] {
    return this.pending;
  }

  /** Where the stream begins each file of toReceive: after the start copied from the booted slot (0 for a whole file). */
  receiveFrom(name: BundleFile): number {
    return this.resumeAt.get(name)?.offset ?? 0;
  }

  /** Bytes copied from the booted slot, whole files and starts together. */
  get takenBytes(): number {
    return this.taken.reduce((sum, name) => sum + this.manifest.files[name].bytes, 0) + [...this.resumeAt.values()].reduce((sum, r) => sum + r.offset, 0);
  }

  /** Where the booted slot keeps its copy of `name`, if it has one of `bytes` bytes (the system partition holds at least that many). */
  private bootedCopy(name: BundleFile, bytes: number): string | undefined {
    if (name === "system") return this.bootedSystemDevice !== undefined && deviceBytes(this.bootedSystemDevice) >= bytes ? this.bootedSystemDevice : undefined;
    const path = this.layout.esp.slot(this.booted)[name];
    return existsSync(path) && Bun.file(path).size === bytes ? path : undefined;
  }

  /**
   * Copies every file the booted slot holds too from there instead of the
   * stream: a candidate of the right size is copied and hashed as it goes,
   * and counts only if its sha256 is the bundle's (else the stream carries
   * it, and overwrites the copy). Yields after each chunk, for progress.
   * Runs once, before the first byte of the stream.
   */
  async *takeFromBootedSlot(): AsyncGenerator<BundleFile | "done"> {
    if (this.streamed || this.tookFromBooted) throw new BundleError("the booted slot's files are taken before the stream, once");
    this.tookFromBooted = true;
    for (const name of BUNDLE_FILES) {
      const info = this.manifest.files[name];
      if (info.chunks !== undefined) {
        const path = this.layout.esp.slot(this.booted)[name as Exclude<BundleFile, "system">];
        if (existsSync(path)) yield* this.takeAlikeChunks(name, info as BundleFileInfo & { chunks: string[] }, path);
        continue;
      }
      const source = this.bootedCopy(name, info.bytes);
      if (source === undefined) continue;
      const { copied, hasher } = yield* this.copyFromBooted(name, source, info.bytes, TAKE_CHUNK_BYTES);
      if (copied === info.bytes && hasher.digest("hex") === info.sha256) this.taken.push(name);
      else this.writtenTotal -= copied;
    }
    this.pending = BUNDLE_FILES.filter((name) => !this.taken.includes(name));
    yield "done";
  }

  /**
   * Copies file `name`'s chunks from `source` (the booted slot's copy) for
   * as long as each hashes to the bundle's chunk at the same place; the
   * whole file's hash goes on over what the stream brings after them. A
   * file alike to its last chunk counts as taken.
   */
  private async *takeAlikeChunks(name: BundleFile, info: BundleFileInfo & { chunks: string[] }, source: string): AsyncGenerator<BundleFile> {
    const { copied, hasher: whole } = yield* this.copyFromBooted(
      name,
      source,
      info.bytes,
      BUNDLE_CHUNK_BYTES,
      (part, index) => new Bun.CryptoHasher("sha256").update(part).digest("hex") === info.chunks[index],
    );
    if (copied === info.bytes) {
      if (whole.digest("hex") === info.sha256) this.taken.push(name);
      // Chunks that all match a file they do not add up to: the bundle
      // contradicts itself; the stream carries the whole file, and its
      // sha256 decides.
      else this.writtenTotal -= copied;
    } else if (copied > 0) this.resumeAt.set(name, { offset: copied, hasher: whole });
  }

  /**
   * Copies file `name` from `source` into its target, `chunkBytes` at a
   * time from the start, each chunk hashed into the file's hash as it is
   * written, for as long as `accept` takes the chunk (every chunk, without
   * it) and the source has it whole; syncs what was written. Yields after
   * each chunk, for progress; returns how much was copied, and the hash.
   */
  private async *copyFromBooted(
    name: BundleFile,
    source: string,
    bytes: number,
    chunkBytes: number,
    accept: (part: Uint8Array, index: number) => boolean = () => true,
  ): AsyncGenerator<BundleFile, { copied: number; hasher: Bun.CryptoHasher }> {
    const input = await open(source, "r");
    const output = await this.openTarget(name);
    const hasher = new Bun.CryptoHasher("sha256");
    const buffer = Buffer.alloc(Math.min(chunkBytes, bytes));
    let copied = 0;
    try {
      for (let index = 0; copied < bytes; index++) {
        const length = Math.min(buffer.length, bytes - copied);
        const { bytesRead } = await input.read(buffer, 0, length, copied);
        if (bytesRead !== length) break;
        const part = buffer.subarray(0, length);
        if (!accept(part, index)) break;
        hasher.update(part);
        await this.writeTo(name, output, part, copied);
        copied += length;
        this.writtenTotal += length;
        yield name;
      }
      await this.onFileSystemOf(name, () => output.sync());
    } finally {
      await input.close();
      await output.close();
    }
    return { copied, hasher };
  }

  /** Where an ESP file arrives: beside its place in the slot's directory, renamed over it by finish(). */
  private stagedPath(name: Exclude<BundleFile, "system">): string {
    return temporaryOf(this.layout.esp.slot(this.slot)[name]);
  }

  /**
   * Runs `work` on file `name`'s file system: an ESP file under the ESP's
   * lock, as every ESP writer does (a scrub fills the ESP's free space
   * while it holds it: localstorage/scrub.ts), the system partition as it is.
   */
  private onFileSystemOf<T>(name: BundleFile, work: () => Promise<T>): Promise<T> {
    return name === "system" ? work() : exclusively(this.layout.esp.path, work);
  }

  private async writeTo(name: BundleFile, handle: FileHandle, bytes: Uint8Array, position: number): Promise<void> {
    await this.onFileSystemOf(name, () => handle.write(bytes, 0, bytes.length, position));
  }

  /** Opens where file `name` goes: the target system partition, or its staging file (emptied, unless `keep`: its start was copied already). */
  private openTarget(name: BundleFile, keep = false): Promise<FileHandle> {
    return name === "system" ? open(this.systemDevice, "r+") : exclusively(this.layout.esp.path, () => open(this.stagedPath(name), keep ? "r+" : "w", 0o600));
  }

  /** Takes the next bytes of the bundle (the files it must still receive, back to back, in BUNDLE_FILES order). */
  async write(chunk: Uint8Array): Promise<void> {
    if (this.closed) throw new BundleError("the update was already finished or abandoned");
    this.streamed = true;
    let offset = 0;
    while (offset < chunk.length) {
      const name = this.pending[this.index];
      if (name === undefined) throw new BundleError(`the bundle sent more than the ${this.total} bytes its description lists`);
      const info = this.manifest.files[name];
      if (this.target === undefined) {
        const resume = this.resumeAt.get(name);
        this.target = await this.openTarget(name, resume !== undefined);
        if (resume) {
          this.fileWritten = resume.offset;
          this.hasher = resume.hasher;
        }
      }
      const take = Math.min(info.bytes - this.fileWritten, chunk.length - offset);
      const part = chunk.subarray(offset, offset + take);
      await this.writeTo(name, this.target, part, this.fileWritten);
      this.hasher.update(part);
      this.fileWritten += take;
      this.writtenTotal += take;
      offset += take;
      if (this.fileWritten === info.bytes) {
        const digest = this.hasher.digest("hex");
        const done = this.target;
        await this.onFileSystemOf(name, () => done.sync());
        await this.target!.close();
        this.target = undefined;
        if (digest !== info.sha256) throw new BundleError(`the bundle's ${name} does not match its sha256 (got ${digest.slice(0, 12)}…, want ${info.sha256.slice(0, 12)}…): it was changed or damaged`);
        this.index++;
        this.fileWritten = 0;
        this.hasher = new Bun.CryptoHasher("sha256");
      }
    }
  }

  /** Installs the checked files into the slot's ESP directory and makes the slot the one-shot next boot. */
  async finish(): Promise<void> {
    if (this.closed) throw new BundleError("the update was already finished or abandoned");
    if (this.index < this.pending.length) {
      throw new BundleError(`the bundle ended after ${this.writtenTotal} of ${this.total} bytes (in its ${this.pending[this.index]}): it is truncated`);
    }
    this.closed = true;
    const files = this.layout.esp.slot(this.slot);
    await exclusively(this.layout.esp.path, () => {
      // cmdline last: until it is there, the slot choice cannot load the slot.
      for (const name of ESP_FILES) {
        const staged = this.stagedPath(name);
        if (!existsSync(staged)) throw new BundleError(`the slot's ${name} went missing before it was installed`);
        replaceDurably(staged, files[name]);
      }
      const record = readBootRecord(this.layout);
      writeBootRecord(this.layout, { active: record.active, next: this.slot });
    });
  }

  /** Stops writing; the target slot stays unbootable (it has no cmdline). */
  async abort(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.target?.close().catch(() => {});
    this.target = undefined;
    await exclusively(this.layout.esp.path, () => {
      for (const name of ESP_FILES) rmSync(this.stagedPath(name), { force: true });
    });
  }
}

/** The slot's ESP files, in the order they are installed: cmdline last, since it makes the slot bootable. */
const ESP_FILES = ["version", "kernel", "initramfs", "cmdline"] as const;

/** Room kept free on the ESP beyond a slot's files: the boot record, failure notes and sealed configuration are rewritten there. */
const ESP_HEADROOM_BYTES = 4 * 1024 * 1024;

/** The name a file has while it arrives (writeFileDurably's). */
function temporaryOf(path: string): string {
  return `${path}.tmp`;
}
