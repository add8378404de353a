// `ctl image import` and `ctl image list`: offline bundles streamed to
// workers over node management, and what their image stores hold. The
// bundle is checked here first (internal/containerd's checkImageBundle, the
// check each node makes again), so a broken file costs no transfer.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { statSync } from "node:fs";
import { fileChunks } from "./file_chunks.ts";
import { basename } from "node:path";
import { ImportPhase, type ContainerImage, type ImportImagesRequestSchema } from "../../proto/gen/api/node_management_pb.ts";
import { BundleCheckError, checkImageBundle } from "../containerd/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { alignColumns, mib, type NodeSummary } from "./format.ts";
import { settleBounded, type Settled } from "./bounded.ts";
import { withListedNode } from "./node_management.ts";
import { nameOf } from "./nodes.ts";

/** How long one node's import may take (its bytes, its check and containerd's import), under emulation too. */
export const IMPORT_TIMEOUT_MS = 30 * 60_000;

/** The bundle, checked as a node will check it: its images' names, or an OperatorError saying what is wrong. */
export async function checkBundleFile(file: string): Promise<{ images: string[]; bytes: number }> {
  let bytes: number;
  try {
    bytes = statSync(file).size;
  } catch (err) {
    throw new OperatorError(`cannot read ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  try {
    return { images: (await checkImageBundle(file)).images, bytes };
  } catch (err) {
    if (err instanceof BundleCheckError) throw new OperatorError(`${file}: ${err.message}; nothing was sent`);
    throw err;
  }
}

/** The nodes an import goes to: those named, or every UP worker. */
export function importTargets(nodes: readonly NodeSummary[], named: readonly string[]): NodeSummary[] {
  if (named.length) return named.map((id) => nodes.find((n) => n.id === id)!).filter(Boolean);
  const workers = nodes.filter((n) => n.state === "UP" && n.roles.includes("kubernetes-worker"));
  if (workers.length === 0) throw new OperatorError("no node that is UP holds the kubernetes-worker role: there is no image store to import into (name nodes with --node)");
  return workers;
}

async function* importRequests(file: string, bytes: number): AsyncIterable<MessageInitShape<typeof ImportImagesRequestSchema>> {
  yield { sizeBytes: BigInt(bytes), fileName: basename(file) };
  for (const data of fileChunks(file, 0, bytes)) yield { data };
}

/** Streams the bundle to one node; returns the images it imported. */
export async function importOnto(credentials: OwnerCredentials, node: NodeSummary, file: string, bytes: number, say: { progress: (line: string) => void }): Promise<string[]> {
  return withListedNode(credentials, node, async (client) => {
    let images: string[] | undefined;
    for await (const answer of client.importImages(importRequests(file, bytes), { timeoutMs: IMPORT_TIMEOUT_MS })) {
      const received = Number(answer.receivedBytes);
      if (answer.phase === ImportPhase.RECEIVING) say.progress(`${nameOf(node)}: sending ${basename(file)}: ${mib(received)} of ${mib(bytes)} (${bytes ? Math.floor((100 * received) / bytes) : 0} %)`);
      else if (answer.phase === ImportPhase.CHECKING) say.progress(`${nameOf(node)}: checking the bundle`);
      else if (answer.phase === ImportPhase.IMPORTING) say.progress(`${nameOf(node)}: importing into its image store`);
      else if (answer.phase === ImportPhase.IMPORTED) images = answer.images;
    }
    if (!images) throw new OperatorError(`${nameOf(node)} ended the import without saying it was done`);
    return images;
  });
}

/**
 * How many nodes one `ctl image import` sends to at once. Each node checks
 * and imports on its own CPU and disk, so they go in parallel; the bound
 * keeps the owner's uplink and file reads shared among a few at a time.
 */
export const IMPORT_CONCURRENCY = 4;

export interface ImportResults {
  imported: { node: NodeSummary; images: string[] }[];
  failed: { node: NodeSummary; error: Error }[];
}

/**
 * Streams the bundle to every target, IMPORT_CONCURRENCY at a time, each
 * on its own; one node's failure does not stop the others. `done` is told
 * each node's result as it comes; the results keep the targets' order.
 */
export async function importOntoAll(
  credentials: OwnerCredentials,
  targets: readonly NodeSummary[],
  file: string,
  bytes: number,
  say: { progress: (line: string) => void },
  done: (node: NodeSummary, result: Settled<string[]>) => void = () => {},
): Promise<ImportResults> {
  const settled = await settleBounded(targets, IMPORT_CONCURRENCY, (node) => importOnto(credentials, node, file, bytes, say), done);
  const results: ImportResults = { imported: [], failed: [] };
  settled.forEach((result, i) => {
    const node = targets[i]!;
    if (result.ok) results.imported.push({ node, images: result.value });
    else results.failed.push({ node, error: result.error });
  });
  return results;
}

/** Each node's images as a table: NODE, IMAGE, DIGEST (short), SIZE. */
export function imageTable(listings: readonly { node: string; images: readonly ContainerImage[] }[]): string {
  const rows = [["NODE", "IMAGE", "DIGEST", "SIZE"], ...listings.flatMap((l) => l.images.map((i) => [l.node, i.name, i.digest.slice(0, 19), i.size]))];
  return rows.length === 1 ? "no images" : alignColumns(rows).join("\n");
}
