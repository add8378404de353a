// The worker's Kubernetes image store as node management uses it: offline
// bundles imported into CRI's namespace (`ctl image import`), and what the
// store holds (`ctl image list`). The store is containerd's, on the data
// partition, so what is imported stays across reboots; CRI sees an image
// as soon as it is imported.

import type { RuntimePaths } from "./config.ts";
import { CRI_NAMESPACE } from "./config.ts";
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
  /** The named images of CRI's namespace (not the ID and digest references CRI adds). */
  list(signal?: AbortSignal): Promise<ImageListing[]>;
}

/** `ctr images ls` lines: REF TYPE DIGEST SIZE PLATFORMS LABELS. */
const LISTING = /^(\S+)\s+(\S+)\s+(sha256:[0-9a-f]{64})\s+([\d.]+ [A-Za-z]+)(?:\s|$)/;

export function parseImageListing(output: string): ImageListing[] {
  const images: ImageListing[] = [];
  for (const line of output.split("\n").slice(1)) {
    const match = LISTING.exec(line);
    if (!match) continue;
    const [, name = "", , digest = "", size = ""] = match;
    // CRI adds its own references: the image ID (sha256:…) and name@digest.
    if (name.startsWith("sha256:") || name.includes("@sha256:")) continue;
    images.push({ name, digest, size });
  }
  return images;
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
      return parseImageListing(await ctr(paths, ["images", "ls"], signal, CRI_NAMESPACE));
    },
  };
}
