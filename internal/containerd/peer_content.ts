// The serving half of the peer mirror (peer_mirror.ts): what a worker's
// containerd holds, handed to the other workers by digest.
//
//   ImagePeer.Fetch{digest, manifest?, header_only?}   (mutual TLS, port 7838)
//        │ the caller: a node certificate under the cluster CA, and a
//        │ kubernetes-worker in the cluster's records (checked per call,
//        │ and the open stream ends when the records take the role away)
//        ▼
//   <containerd root>/io.containerd.content.v1.content/blobs/<alg>/<hex>
//        header {size, media type}, then the bytes in 256 KiB chunks
//
// Only committed content is there: containerd writes what it fetches into
// its ingest directory and renames it into blobs/ once the digest matched,
// so a file here is what its name says, and it never changes. A manifest
// is asked for as one (the proxy knows which endpoint containerd called):
// it must parse as a manifest or an index, whose media type the header
// carries, since containerd takes a manifest's type from the response.

import { createReadStream } from "node:fs";
import { readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { ContentHeaderSchema, FetchResponseSchema, ImagePeer } from "../../proto/gen/imagepeer/imagepeer_pb.ts";
import { InvalidArgumentError, NotFoundError, quote, type ServiceImpl } from "../rpc/mod.ts";

/** The port every worker serves ImagePeer on (node management is on 7836). */
export const IMAGE_PEER_PORT = 7838;
/** A digest as content is named: the peer mirror serves nothing by tag. */
export const CONTENT_DIGEST = /^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$/;
/** The largest manifest served: the size containerd itself reads manifests up to. */
export const MAX_MANIFEST_BYTES = 4 * 1024 * 1024;
/** The bytes of one streamed chunk. */
export const CONTENT_CHUNK_BYTES = 256 * 1024;

export const OCTET_STREAM = "application/octet-stream";
const OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX = "application/vnd.oci.image.index.v1+json";
/** The media types containerd pulls as manifests or indexes. */
export const MANIFEST_MEDIA_TYPES: ReadonlySet<string> = new Set([
  OCI_MANIFEST,
  OCI_INDEX,
  "application/vnd.docker.distribution.manifest.v2+json",
  "application/vnd.docker.distribution.manifest.list.v2+json",
]);

type ContentHeader = MessageInitShape<typeof ContentHeaderSchema>;
type FetchResponse = MessageInitShape<typeof FetchResponseSchema>;

/** Where containerd keeps the content of `digest` below its root (RuntimePaths.root). */
export function contentPath(root: string, digest: string): string {
  const [algorithm = "", hex = ""] = digest.split(":");
  return join(root, "io.containerd.content.v1.content", "blobs", algorithm, hex);
}

/**
 * The media type of a manifest or index document, or undefined if it is
 * neither: its own mediaType when it names one, else what its fields say
 * (the OCI spec lets mediaType out).
 */
export function manifestMediaType(document: unknown): string | undefined {
  if (typeof document !== "object" || document === null || Array.isArray(document)) return undefined;
  const fields = document as { mediaType?: unknown; manifests?: unknown; config?: unknown; layers?: unknown };
  if (fields.mediaType !== undefined) return typeof fields.mediaType === "string" && MANIFEST_MEDIA_TYPES.has(fields.mediaType) ? fields.mediaType : undefined;
  if (Array.isArray(fields.manifests)) return OCI_INDEX;
  if (typeof fields.config === "object" && fields.config !== null && Array.isArray(fields.layers)) return OCI_MANIFEST;
  return undefined;
}

/** What this node holds under `digest`: its header and, for a manifest, its bytes; undefined if it holds none (or it is not a manifest when one is asked for). */
export async function readContent(root: string, digest: string, manifest: boolean): Promise<{ header: ContentHeader; bytes?: Buffer } | undefined> {
  const path = contentPath(root, digest);
  let size: number;
  try {
    const info = await stat(path);
    if (!info.isFile()) return undefined;
    size = info.size;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return undefined;
    throw err;
  }
  if (!manifest) return { header: { size: BigInt(size), mediaType: OCTET_STREAM } };
  if (size > MAX_MANIFEST_BYTES) return undefined;
  const bytes = await readFile(path);
  let document: unknown;
  try {
    document = JSON.parse(bytes.toString("utf8"));
  } catch {
    return undefined;
  }
  const mediaType = manifestMediaType(document);
  return mediaType ? { header: { size: BigInt(bytes.length), mediaType }, bytes } : undefined;
}

/** Why `digest` cannot be asked for; undefined if it can. */
export function digestProblem(digest: string): string | undefined {
  return CONTENT_DIGEST.test(digest) ? undefined : `digest: ${quote(digest, 140)} is not sha256:<64 hex> or sha512:<128 hex> (content is served by digest only)`;
}

/** ImagePeer: serves the content below containerd's root `root`. The caller was admitted by the server's policy and admit check. */
export function imagePeerService(root: string): ServiceImpl<typeof ImagePeer> {
  return {
    async *fetch(request, ctx): AsyncIterable<FetchResponse> {
      const problem = digestProblem(request.digest);
      if (problem) throw new InvalidArgumentError(problem);
      const content = await readContent(root, request.digest, request.manifest);
      if (!content) throw new NotFoundError(`this node holds no ${request.manifest ? "manifest" : "content"} ${request.digest}`);
      yield { kind: { case: "header", value: content.header } };
      if (request.headerOnly) return;
      if (content.bytes) {
        for (let at = 0; at < content.bytes.length; at += CONTENT_CHUNK_BYTES) yield { kind: { case: "chunk", value: content.bytes.subarray(at, at + CONTENT_CHUNK_BYTES) } };
        return;
      }
      const stream = createReadStream(contentPath(root, request.digest), { highWaterMark: CONTENT_CHUNK_BYTES, signal: ctx.signal });
      for await (const chunk of stream) yield { kind: { case: "chunk", value: chunk as Buffer } };
    },
  };
}
