// Offline image bundles (`ctl image import`): a tar holding an OCI image
// layout (oci-layout, index.json, blobs/sha256/…) or what `docker save`
// writes (manifest.json, the configs and layer tars). The whole bundle is
// checked before anything is imported, so a truncated file, a file that is
// no image, or a blob whose bytes are not its digest adds nothing:
//
//   tar ──readTarIndex──▶ every member: name, offset, size; sha256 of every
//        │                blobs/sha256/<hex> member (one pass, streaming)
//        │                truncated? a member past the end, no end blocks
//        ▼
//   checkImageBundle ──▶ OCI: index.json → manifests (and nested indexes)
//        │                  → config and layers present, sizes and digests
//        │               docker save: manifest.json → Config, Layers present
//        ▼
//   the images' names (what `ctr images import` will create)
//
// Pure but for reading the file, which it reads asynchronously a MiB at a
// time: the node's event loop (its curator, its heartbeats) keeps going
// while a large bundle is hashed.
//
// The tar is read as containerd's importer (Go's archive/tar) reads it, or
// refused: no PAX or GNU extended headers (which could rename or resize a
// member for Go but not for this reader), no name that path cleaning would
// change (x/../index.json), no name twice, and the format chosen as
// containerd chooses it (oci-layout present: an OCI layout; otherwise
// manifest.json: docker save).

import { open, type FileHandle } from "node:fs/promises";

const BLOCK = 512;
/** Most members a bundle may hold, and the largest JSON member read. */
export const MAX_BUNDLE_MEMBERS = 100_000;
const MAX_JSON_BYTES = 4 * 1024 * 1024;
/** Most images one bundle may name, and most descriptors its indexes may name in all. */
export const MAX_BUNDLE_IMAGES = 1_000;
const MAX_DESCRIPTORS = 10_000;
/** The node's own images, which no bundle may replace. */
const OWN_IMAGES = /^nodecore\.local\//;
const READ_CHUNK = 1024 * 1024;

export class BundleCheckError extends Error {
  override name = "BundleCheckError";
}

interface Member {
  offset: number;
  size: number;
  /** sha256 hex of its bytes, for members under blobs/sha256/. */
  sha256?: string;
}

function octal(field: Uint8Array): number {
  const text = new TextDecoder().decode(field).replace(/\0.*$/s, "").trim();
  if (text === "") return 0;
  if (!/^[0-7]+$/.test(text)) throw new BundleCheckError(`not a tar file (a header field reads ${JSON.stringify(text.slice(0, 16))})`);
  return parseInt(text, 8);
}

function headerName(header: Uint8Array): string {
  const field = (start: number, length: number) => new TextDecoder().decode(header.subarray(start, start + length)).replace(/\0.*$/s, "");
  const prefix = field(345, 155);
  const name = field(0, 100);
  return (prefix ? `${prefix}/${name}` : name).replace(/^\.\//, "");
}

function checksumOk(header: Uint8Array): boolean {
  let sum = 0;
  for (let i = 0; i < BLOCK; i++) sum += i >= 148 && i < 156 ? 32 : header[i]!;
  const field = new TextDecoder().decode(header.subarray(148, 156)).replace(/\0.*$/s, "").trim();
  return /^[0-7]+$/.test(field) && sum === parseInt(field, 8);
}

/** A member's name as Go's path.Clean leaves it, or undefined when cleaning would change it. */
function cleanName(name: string): string | undefined {
  const stripped = name.replace(/^(\.\/)+/, "");
  const segments = stripped.split("/");
  if (stripped === "" || stripped.startsWith("/") || segments.some((s) => s === "" || s === "." || s === "..")) return undefined;
  return stripped;
}

async function readExactly(file: FileHandle, position: number, length: number): Promise<Uint8Array> {
  const buffer = new Uint8Array(length);
  let done = 0;
  while (done < length) {
    const { bytesRead } = await file.read(buffer, done, length - done, position + done);
    if (bytesRead === 0) throw new BundleCheckError("the tar is cut short inside a file (truncated?)");
    done += bytesRead;
  }
  return buffer;
}

async function hashRange(file: FileHandle, position: number, length: number): Promise<string> {
  const hash = new Bun.CryptoHasher("sha256");
  const buffer = new Uint8Array(Math.min(READ_CHUNK, Math.max(length, 1)));
  let done = 0;
  while (done < length) {
    const { bytesRead } = await file.read(buffer, 0, Math.min(buffer.length, length - done), position + done);
    if (bytesRead === 0) throw new BundleCheckError("the tar is cut short inside a blob (truncated?)");
    hash.update(buffer.subarray(0, bytesRead));
    done += bytesRead;
  }
  return hash.digest("hex");
}

/**
 * Every regular file of the open tar, with the sha256 of those under
 * blobs/sha256/. Refuses a file that is no tar, one cut short, one without
 * the two zero blocks that end a tar, and one that Go's reader would read
 * otherwise (module comment).
 */
async function readTarIndex(file: FileHandle): Promise<Map<string, Member>> {
  const members = new Map<string, Member>();
  const header = new Uint8Array(BLOCK);
  let offset = 0;
  for (;;) {
    const { bytesRead } = await file.read(header, 0, BLOCK, offset);
    if (bytesRead === 0) throw new BundleCheckError(members.size === 0 ? "the file is empty" : "the tar is cut short: it ends without its end-of-archive blocks (truncated?)");
    if (bytesRead < BLOCK) throw new BundleCheckError("the tar is cut short in a header (truncated?)");
    if (header.every((b) => b === 0)) {
      if (members.size === 0) throw new BundleCheckError("the tar holds nothing");
      return members;
    }
    if (!checksumOk(header))
      throw new BundleCheckError(offset === 0 ? "not a tar file (an OCI image layout or docker save tar)" : `the tar is damaged at byte ${offset} (a header's checksum is wrong)`);
    const size = octal(header.subarray(124, 136));
    const type = String.fromCharCode(header[156]!);
    if ("xgLKN".includes(type)) throw new BundleCheckError(`the tar has extended headers (PAX or GNU, type '${type}'), which OCI layouts and docker save do not need; nothing is read from such a tar`);
    const raw = headerName(header);
    const data = offset + BLOCK;
    if (type === "0" || type === "\0") {
      const name = cleanName(raw);
      if (name === undefined) throw new BundleCheckError(`the tar names a file ${JSON.stringify(raw.slice(0, 120))}, which is no plain path`);
      if (members.has(name)) throw new BundleCheckError(`the tar holds ${JSON.stringify(name.slice(0, 120))} twice`);
      if (members.size >= MAX_BUNDLE_MEMBERS) throw new BundleCheckError(`more than ${MAX_BUNDLE_MEMBERS} files in the tar`);
      const member: Member = { offset: data, size };
      if (/^blobs\/sha256\/[0-9a-f]{64}$/.test(name)) member.sha256 = await hashRange(file, data, size);
      else if (size > 0) await readExactly(file, data + size - 1, 1); // cut short inside this member?
      members.set(name, member);
    }
    offset = data + Math.ceil(size / BLOCK) * BLOCK;
  }
}

interface Descriptor {
  mediaType?: string;
  digest?: string;
  size?: number;
  annotations?: Record<string, string>;
}

/** What a bundle holds, once checked. */
export interface CheckedBundle {
  format: "oci" | "docker";
  /** The image names the import creates. */
  images: string[];
  /** The bytes of its blobs (what the content store takes). */
  blobBytes: number;
  /** An OCI layout's names, each with the digest its index.json points it at (what `ctl image list` shows once imported); docker save's tars have none. */
  digests?: Map<string, string>;
}

const INDEX_TYPES = new Set(["application/vnd.oci.image.index.v1+json", "application/vnd.docker.distribution.manifest.list.v2+json"]);

/**
 * Checks the bundle at `path` whole, before anything is imported: its tar,
 * every blob against its digest, and that what its index names is there.
 * Returns the names of its images; throws BundleCheckError saying what is
 * wrong.
 */
export async function checkImageBundle(path: string): Promise<CheckedBundle> {
  const file = await open(path, "r");
  try {
    const members = await readTarIndex(file);
    const json = async (name: string, what: string): Promise<unknown> => {
      const member = members.get(name);
      if (!member) throw new BundleCheckError(`${what} (${name}) is missing`);
      if (member.size > MAX_JSON_BYTES) throw new BundleCheckError(`${name}: ${member.size} bytes, more than ${MAX_JSON_BYTES}`);
      const bytes = await readExactly(file, member.offset, member.size);
      try {
        return JSON.parse(new TextDecoder().decode(bytes));
      } catch {
        throw new BundleCheckError(`${name} is not JSON`);
      }
    };
    const checkNames = (images: string[]) => {
      const own = images.find((name) => OWN_IMAGES.test(name));
      if (own) throw new BundleCheckError(`${JSON.stringify(own.slice(0, 120))} is one of the node's own images (nodecore.local/…), which a bundle may not replace`);
      if (images.length > MAX_BUNDLE_IMAGES) throw new BundleCheckError(`${images.length} images, more than ${MAX_BUNDLE_IMAGES}`);
      return [...new Set(images)];
    };
    const blobBytes = [...members.entries()].filter(([name]) => name.startsWith("blobs/")).reduce((sum, [, m]) => sum + m.size, 0);
    // As containerd's importer decides: an oci-layout file makes it an OCI layout.
    if (members.has("oci-layout")) {
      const layout = (await json("oci-layout", "the OCI layout marker")) as { imageLayoutVersion?: unknown };
      if (layout.imageLayoutVersion !== "1.0.0") throw new BundleCheckError(`oci-layout: imageLayoutVersion ${JSON.stringify(String(layout.imageLayoutVersion).slice(0, 20))}, not 1.0.0`);
      for (const [name, member] of members) {
        if (member.sha256 !== undefined && `blobs/sha256/${member.sha256}` !== name) throw new BundleCheckError(`${name}: its bytes do not match its digest (sha256:${member.sha256.slice(0, 12)}…)`);
      }
      const blob = (descriptor: Descriptor, what: string) => {
        const digest = descriptor.digest ?? "";
        if (!/^sha256:[0-9a-f]{64}$/.test(digest)) throw new BundleCheckError(`${what}: ${JSON.stringify(digest.slice(0, 80))} is not a sha256 digest`);
        const name = `blobs/sha256/${digest.slice("sha256:".length)}`;
        const member = members.get(name);
        if (!member) throw new BundleCheckError(`${what} ${digest.slice(0, 19)}… is not in the bundle`);
        if (descriptor.size !== undefined && descriptor.size !== member.size)
          throw new BundleCheckError(`${what} ${digest.slice(0, 19)}…: ${member.size} bytes where its descriptor says ${descriptor.size}`);
        return name;
      };
      // Each manifest or index is walked once however often it is named, and all of them together are bounded.
      const walked = new Set<string>();
      let descriptors = 0;
      const walk = async (descriptor: Descriptor, depth: number): Promise<void> => {
        if (depth > 4) throw new BundleCheckError("indexes nested more than 4 deep");
        if (++descriptors > MAX_DESCRIPTORS) throw new BundleCheckError(`its indexes name more than ${MAX_DESCRIPTORS} manifests`);
        const name = blob(descriptor, depth === 0 ? "a manifest" : "a nested manifest");
        if (walked.has(name)) return;
        walked.add(name);
        const document = (await json(name, "a manifest")) as { mediaType?: string; manifests?: Descriptor[]; config?: Descriptor; layers?: Descriptor[] };
        if (INDEX_TYPES.has(document.mediaType ?? descriptor.mediaType ?? "") || Array.isArray(document.manifests)) {
          // An index of platforms: the node takes its own, and may find the others missing (as skopeo copies one).
          const present = (document.manifests ?? []).filter((m) => members.has(`blobs/sha256/${(m.digest ?? "").slice("sha256:".length)}`));
          if (present.length === 0) throw new BundleCheckError(`the index ${name} names no manifest the bundle holds`);
          for (const m of present) await walk(m, depth + 1);
          return;
        }
        if (!document.config) throw new BundleCheckError(`the manifest ${name} has no config`);
        blob(document.config, "the image config");
        for (const layer of document.layers ?? []) blob(layer, "a layer");
      };
      const index = (await json("index.json", "the OCI index")) as { manifests?: Descriptor[] };
      if (!Array.isArray(index.manifests) || index.manifests.length === 0) throw new BundleCheckError("index.json names no manifest");
      if (index.manifests.length > MAX_BUNDLE_IMAGES) throw new BundleCheckError(`index.json names ${index.manifests.length} manifests, more than ${MAX_BUNDLE_IMAGES}`);
      const images: string[] = [];
      const digests = new Map<string, string>();
      for (const descriptor of index.manifests) {
        await walk(descriptor, 0);
        const ref = descriptor.annotations?.["io.containerd.image.name"] ?? descriptor.annotations?.["org.opencontainers.image.ref.name"] ?? "";
        if (!ref.includes("/") && !ref.includes(":")) {
          throw new BundleCheckError(
            `a manifest in index.json has no full image name (annotation io.containerd.image.name or org.opencontainers.image.ref.name, like registry.example.com/app:1); found ${JSON.stringify(ref.slice(0, 80))}`,
          );
        }
        images.push(ref);
        digests.set(ref, descriptor.digest!);
      }
      return { format: "oci", images: checkNames(images), blobBytes, digests };
    }
    if (members.has("manifest.json")) {
      const manifest = (await json("manifest.json", "docker save's manifest")) as { Config?: string; RepoTags?: string[]; Layers?: string[] }[];
      if (!Array.isArray(manifest) || manifest.length === 0) throw new BundleCheckError("manifest.json names no image");
      if (manifest.length > MAX_BUNDLE_IMAGES) throw new BundleCheckError(`manifest.json names ${manifest.length} images, more than ${MAX_BUNDLE_IMAGES}`);
      const images: string[] = [];
      for (const entry of manifest) {
        for (const named of [entry.Config ?? "", ...(entry.Layers ?? [])]) {
          const clean = cleanName(String(named));
          if (clean === undefined || !members.has(clean)) throw new BundleCheckError(`${JSON.stringify(String(named).slice(0, 120))}, named in manifest.json, is not in the bundle`);
        }
        if (!entry.RepoTags?.length) throw new BundleCheckError("an image in manifest.json has no name (RepoTags); save it by name (docker save name:tag)");
        images.push(...entry.RepoTags.map(String));
      }
      const sizes = [...members.values()].reduce((sum, m) => sum + m.size, 0);
      return { format: "docker", images: checkNames(images), blobBytes: sizes };
    }
    if (members.has("index.json")) throw new BundleCheckError("the tar holds index.json but no oci-layout file: not an OCI image layout (and no manifest.json for docker save)");
    throw new BundleCheckError("not an image bundle: the tar holds neither an OCI image layout (oci-layout, index.json) nor docker save's manifest.json");
  } finally {
    await file.close();
  }
}
