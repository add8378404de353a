// The worker's Kubernetes image store as node management uses it: offline
// bundles imported into CRI's namespace (`ctl image import`), and what the
// store holds (`ctl image list`, read from containerd's API and its
// content store). The store is containerd's, on the data
// partition, so what is imported stays across reboots; CRI sees an image
// as soon as it is imported.

import { readFileSync, statSync } from "node:fs";
import { credentials } from "@grpc/grpc-js";
import { Images } from "../../proto/gen/containerd/images_pb.ts";
import { formatBytes } from "../log/mod.ts";
import { createClient } from "../rpc/mod.ts";
import type { RuntimePaths } from "./config.ts";
import { CRI_NAMESPACE } from "./config.ts";
import { CONTENT_DIGEST, MAX_MANIFEST_BYTES, contentPath } from "./peer_content.ts";
import { ctr } from "./service.ts";

export interface ImageListing {
  name: string;
  digest: string;
  size: string;
}

export interface ImageStore {
  /** Where bundles are received before their import: the data partition, beside containerd's root. */
  scratchDir: string;
  /** Imports a checked bundle (bundle.ts) into CRI's namespace; returns what ctr said it imported. */
  importBundle(file: string, signal?: AbortSignal): Promise<string[]>;
  /** The named images of CRI's namespace (not the ID and digest references CRI adds), by name. */
  list(signal?: AbortSignal): Promise<ImageListing[]>;
}

/** How long containerd gets to list a namespace's image records (one read of its metadata database). */
const LIST_TIMEOUT_MS = 10_000;

/** This node's platform in OCI's words (an index's entries name theirs so). */
export const NODE_PLATFORM = { os: "linux", architecture: process.arch === "x64" ? "amd64" : process.arch };

interface DescriptorFields {
  mediaType?: unknown;
  digest?: unknown;
  size?: unknown;
  platform?: { os?: unknown; architecture?: unknown };
}

/** A descriptor's size if it is a byte count, else undefined. */
function sizeOf(descriptor: DescriptorFields | undefined): number | undefined {
  return typeof descriptor?.size === "number" && Number.isSafeInteger(descriptor.size) && descriptor.size >= 0 ? descriptor.size : undefined;
}

/** A manifest or index the content store holds, parsed; undefined when it holds none, or it is no JSON object. */
function readDocument(root: string, digest: string): Record<string, unknown> | undefined {
  if (!CONTENT_DIGEST.test(digest)) return undefined;
  const path = contentPath(root, digest);
  try {
    // The largest manifest containerd itself reads; anything larger is no document of its.
    if (statSync(path).size > MAX_MANIFEST_BYTES) return undefined;
    const parsed: unknown = JSON.parse(readFileSync(path, "utf8"));
    return typeof parsed === "object" && parsed !== null && !Array.isArray(parsed) ? (parsed as Record<string, unknown>) : undefined;
  } catch {
    return undefined;
  }
}

/**
 * The bytes an image takes for this node's platform, as ctr counts them:
 * its root (an index, then this platform's manifest in it, or a
 * manifest), the configuration and the layers, compressed as pulled.
 * Undefined when the content store lacks a document on the way.
 */
export function imageSize(root: string, target: { digest: string; size: number }): number | undefined {
  let total = target.size;
  let manifest = readDocument(root, target.digest);
  if (manifest && Array.isArray(manifest.manifests)) {
    const entries = manifest.manifests as DescriptorFields[];
    const own = entries.find((e) => e.platform?.os === NODE_PLATFORM.os && e.platform?.architecture === NODE_PLATFORM.architecture);
    const ownSize = sizeOf(own);
    if (!own || ownSize === undefined || typeof own.digest !== "string") return undefined;
    total += ownSize;
    manifest = readDocument(root, own.digest);
  }
  if (!manifest || !Array.isArray(manifest.layers)) return undefined;
  const parts = [manifest.config as DescriptorFields | undefined, ...(manifest.layers as DescriptorFields[])].map(sizeOf);
  if (parts.some((size) => size === undefined)) return undefined;
  return parts.reduce<number>((sum, size) => sum + size!, total);
}

/**
 * The named images of containerd's image records: CRI adds records of its
 * own for each image, named by its ID (sha256:…) and by name@digest, which
 * are left out.
 */
export function namedImages(root: string, records: readonly { name: string; target?: { digest: string; size: bigint } }[]): ImageListing[] {
  const images: ImageListing[] = [];
  for (const record of records) {
    if (!record.target || record.name.startsWith("sha256:") || record.name.includes("@sha256:")) continue;
    const size = imageSize(root, { digest: record.target.digest, size: Number(record.target.size) });
    images.push({ name: record.name, digest: record.target.digest, size: size === undefined ? "-" : formatBytes(size) });
  }
  return images.sort((a, b) => a.name.localeCompare(b.name));
}

export function imageStore(paths: RuntimePaths): ImageStore {
  const scratchDir = `${paths.root}-imports`;
  return {
    scratchDir,
    async importBundle(file, signal) {
      const said = await ctr(paths, ["images", "import", "--local", file], signal, CRI_NAMESPACE);
      // "unpacking <name> (sha256:…)...done" per image.
      return [...said.matchAll(/unpacking (\S+) \(sha256:[0-9a-f]+\)/g)].map((m) => m[1]!);
    },
    async list(signal) {
      // containerd's API over its socket, not ctr: a process started per
      // listing cost seconds on a loaded node (ctl image list ran past its
      // deadline on one under TCG).
      const client = createClient(Images, `unix:${paths.socket}`, { credentials: credentials.createInsecure(), metadata: { "containerd-namespace": CRI_NAMESPACE } });
      try {
        const { images } = await client.list({}, { timeoutMs: LIST_TIMEOUT_MS, ...(signal ? { signal } : {}) });
        return namedImages(
          paths.root,
          images.map((image) => ({ name: image.name, ...(image.target ? { target: { digest: image.target.digest, size: image.target.size } } : {}) })),
        );
      } finally {
        client.close();
      }
    },
  };
}
