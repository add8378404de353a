// NodeManagement's image calls: an offline bundle received onto the data
// partition, checked whole, imported into the Kubernetes image store; and
// the store's listing.
//
//   owner ── ImportImages: {size, name} then bytes ──▶ room? (3 × size + a margin free)
//        ◀── RECEIVING (progress every 8 MiB) ── <data>/containerd-imports/<random>.tar
//        ◀── CHECKING ── checkImageBundle (internal/containerd/bundle.ts)
//        ◀── IMPORTING ── ctr images import (CRI's namespace)
//        ◀── IMPORTED {images}; the received file is deleted, whatever happened
//            (and what a crash left is deleted before the next import)

import { randomBytes } from "node:crypto";
import { closeSync, mkdirSync, openSync, readdirSync, rmSync, writeSync } from "node:fs";
import { join } from "node:path";
import { ImportPhase, type NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import { BundleCheckError, checkImageBundle, type ImageStore } from "../containerd/mod.ts";
import { freeSpace } from "../localstorage/mod.ts";
import { formatBytes, type Logger } from "../log/mod.ts";
import { AbortedError, FailedPreconditionError, InvalidArgumentError, quote, type ServiceImpl } from "../rpc/mod.ts";

/** The largest bundle a node takes. */
export const MAX_IMPORT_BYTES = 64 * 1024 ** 3;
/** Progress goes back every this many bytes received. */
export const IMPORT_PROGRESS_EVERY_BYTES = 8 * 1024 * 1024;
/** How far ahead of the node's writing the owner may send (HTTP/2 flow control). */
export const IMPORT_RECEIVE_WINDOW_BYTES = 8 * 1024 * 1024;
/**
 * Free space an import needs on the data partition, besides this margin:
 * the received file, its blobs in containerd's content store, and the
 * layers unpacked, each about the bundle's size (compressed layers unpack
 * larger: the margin and the kubelet's image collection take that).
 */
export const IMPORT_SPACE_FACTOR = 3;
export const IMPORT_SPACE_MARGIN_BYTES = 64 * 1024 * 1024;
const MAX_FILE_NAME_CHARS = 256;

export interface ImageDeps {
  /** The Kubernetes image store while this node runs a kubelet's containerd; undefined otherwise. */
  images?: () => ImageStore | undefined;
  logger?: Logger;
}

function runningStore(deps: ImageDeps): ImageStore {
  const store = deps.images?.();
  if (!store) throw new FailedPreconditionError("this node runs no Kubernetes image store: it holds no kubernetes-worker role, or its containerd is not up yet");
  return store;
}

/** The free space an import of `size` bytes needs. */
export function importNeeds(size: number): number {
  return IMPORT_SPACE_FACTOR * size + IMPORT_SPACE_MARGIN_BYTES;
}

export function imageCalls(deps: ImageDeps): Pick<ServiceImpl<typeof NodeManagement>, "importImages" | "listImages"> {
  let importing = false;
  return {
    async *importImages(requests, ctx) {
      const stream = requests[Symbol.asyncIterator]();
      const first = await stream.next();
      if (first.done) throw new InvalidArgumentError("the import ended before its first request");
      const head = first.value;
      if (head.data.length > 0) throw new InvalidArgumentError("the first request carries data; send the bundle's bytes in the requests after it");
      const size = Number(head.sizeBytes);
      if (size <= 0) throw new InvalidArgumentError("size_bytes: the bundle is empty");
      if (size > MAX_IMPORT_BYTES) throw new InvalidArgumentError(`size_bytes: ${formatBytes(size)}, more than the ${formatBytes(MAX_IMPORT_BYTES)} one import takes`);
      if (head.fileName.length > MAX_FILE_NAME_CHARS) throw new InvalidArgumentError(`file_name: ${head.fileName.length} characters, more than ${MAX_FILE_NAME_CHARS}`);
      const name = quote(head.fileName || "the bundle");
      const store = runningStore(deps);
      if (importing) throw new AbortedError("an import is being written to this node already; wait for it to end");
      importing = true;
      const file = join(store.scratchDir, `${randomBytes(8).toString("hex")}.tar`);
      let fd: number | undefined;
      try {
        mkdirSync(store.scratchDir, { recursive: true, mode: 0o700 });
        // What an import cut short by a crash or a power cut left (one import runs at a time).
        for (const stale of readdirSync(store.scratchDir)) rmSync(join(store.scratchDir, stale), { recursive: true, force: true });
        const { freeBytes } = freeSpace(store.scratchDir);
        if (freeBytes < importNeeds(size)) {
          throw new FailedPreconditionError(
            `${name} (${formatBytes(size)}) does not fit this node: an import needs about ${formatBytes(importNeeds(size))} free on the data partition, which has ${formatBytes(freeBytes)}`,
          );
        }
        const progress = (phase: ImportPhase, received: number, images: string[] = []) => ({ phase, receivedBytes: BigInt(received), totalBytes: BigInt(size), images });
        yield progress(ImportPhase.RECEIVING, 0);
        ctx.widenReceiveWindow(IMPORT_RECEIVE_WINDOW_BYTES);
        fd = openSync(file, "wx", 0o600);
        // Where an import's time goes (the log line at its end): receiving, checking, containerd's import.
        const started = performance.now();
        let received = 0;
        let reported = 0;
        for (;;) {
          const next = await stream.next();
          if (next.done) break;
          ctx.signal.throwIfAborted();
          const data = next.value.data;
          if (received + data.length > size) throw new InvalidArgumentError(`${name}: more bytes than the ${size} the first request said`);
          for (let at = 0; at < data.length;) at += writeSync(fd, data, at, data.length - at);
          received += data.length;
          if (received - reported >= IMPORT_PROGRESS_EVERY_BYTES) {
            reported = received;
            yield progress(ImportPhase.RECEIVING, received);
          }
        }
        closeSync(fd);
        fd = undefined;
        if (received !== size) throw new InvalidArgumentError(`${name}: the import ended after ${received} of its ${size} bytes`);
        yield progress(ImportPhase.CHECKING, received);
        const receivedAt = performance.now();
        let checked;
        try {
          checked = await checkImageBundle(file);
        } catch (err) {
          if (err instanceof BundleCheckError) throw new InvalidArgumentError(`${name}: ${err.message}; nothing was imported`);
          throw err;
        }
        yield progress(ImportPhase.IMPORTING, received);
        const checkedAt = performance.now();
        const images = await store.importBundle(file, ctx.signal);
        const ms = (from: number, to: number) => Math.round(to - from);
        const took = { receiveMs: ms(started, receivedAt), checkMs: ms(receivedAt, checkedAt), importMs: ms(checkedAt, performance.now()) };
        if (images.length === 0) throw new FailedPreconditionError(`${name}: containerd imported no image from it (it names ${checked.images.join(", ")})`);
        deps.logger?.info(`imported ${images.length} image${images.length === 1 ? "" : "s"} from an offline bundle`, { images: images.join(","), bytes: size, ...took });
        yield progress(ImportPhase.IMPORTED, received, images);
      } finally {
        if (fd !== undefined) closeSync(fd);
        rmSync(file, { force: true });
        importing = false;
      }
    },

    async listImages(_request, ctx) {
      const store = runningStore(deps);
      return { images: await store.list(ctx.signal) };
    },
  };
}
