// `ctl node update <node> --image DIR` and `ctl node rollback <node>`: an
// update bundle (what `bun run image` writes to out/image/slot/) streamed to
// a node's management service, which writes it into the slot it is not
// running and boots it once as a trial (internal/update).
//
//   read DIR/bundle.json ─▶ every file there, its size and sha256 checked
//     here first (a damaged bundle never leaves this machine)
//   ─▶ the node HEALTHY? (else refused, unless --force)
//   ─▶ NodeManagement.Update: the description; the node copies what its
//      booted slot holds as well and names the files it still needs; their
//      bytes; the node says how far it has written ─▶ "installed: slot b
//      boots next"
//   --activate ─▶ the node reboots into it; --wait ─▶ until it is back,
//      HEALTHY, at the new version; or back at the old one, with the reason
//      its trial failed

import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { MessageInitShape } from "@bufbuild/protobuf";
import { UpdatePhase, type UpdateRequestSchema } from "../../proto/gen/api/node_management_pb.ts";
import { BUNDLE_FILES, BUNDLE_MANIFEST, BundleError, parseBundleManifest, type BundleFile, type BundleManifest } from "../update/mod.ts";
import { OperatorError, type OwnerCredentials } from "./config_dir.ts";
import { withListedNode } from "./node_management.ts";
import { listNodesPatiently, nameOf, waitForNode, type CallSettings } from "./nodes.ts";
import { mib, type NodeSummary } from "./format.ts";
import { fileChunks } from "./file_chunks.ts";

/** How long one update's stream may take: a bundle is about 160 MiB, and a busy emulated node writes it slowly. */
export const UPDATE_TIMEOUT_MS = 20 * 60_000;

export interface Bundle {
  dir: string;
  manifest: BundleManifest;
  /** bundle.json as it is: the node parses it again. */
  text: string;
}

/** Reads and checks an update bundle directory; throws an OperatorError naming the first file that does not match its description. */
export async function readBundle(dir: string, progress?: (line: string) => void): Promise<Bundle> {
  const path = join(dir, BUNDLE_MANIFEST);
  if (!existsSync(path)) throw new OperatorError(`${dir} is not an update bundle: it has no ${BUNDLE_MANIFEST} (bun run image writes one to out/image/slot/)`);
  const text = readFileSync(path, "utf8");
  let manifest: BundleManifest;
  try {
    manifest = parseBundleManifest(text);
  } catch (err) {
    throw new OperatorError(`${path}: ${(err as BundleError).message}`);
  }
  for (const name of BUNDLE_FILES) {
    const file = join(dir, name);
    const want = manifest.files[name];
    if (!existsSync(file)) throw new OperatorError(`the bundle in ${dir} has no ${name}`);
    const size = statSync(file).size;
    if (size !== want.bytes) throw new OperatorError(`the bundle's ${name} is ${size} bytes; ${BUNDLE_MANIFEST} says ${want.bytes}: it is truncated or was changed`);
    progress?.(`checking the bundle's ${name} (${mib(size)}) ...`);
    const hasher = new Bun.CryptoHasher("sha256");
    for await (const chunk of Bun.file(file).stream()) hasher.update(chunk);
    if (hasher.digest("hex") !== want.sha256) throw new OperatorError(`the bundle's ${name} does not match the sha256 in ${BUNDLE_MANIFEST}: it was changed or damaged`);
  }
  return { dir, manifest, text };
}

/**
 * The requests of one update: the description and options, then the bytes
 * of the files the node asks for (`wanted`, once it has taken the rest from
 * its booted slot), in order.
 */
async function* updateRequests(
  bundle: Bundle,
  options: { activate: boolean; allowDowngrade: boolean },
  wanted: Promise<readonly WantedFile[]>,
): AsyncIterable<MessageInitShape<typeof UpdateRequestSchema>> {
  yield { bundleManifest: bundle.text, activate: options.activate, allowDowngrade: options.allowDowngrade };
  const files = await wanted;
  for (const { name, from } of files) for (const data of fileChunks(join(bundle.dir, name), from)) yield { data };
}

/** A file the node asked for, from this byte on (it copied the ones before from its booted slot). */
export interface WantedFile {
  name: BundleFile;
  from: number;
}

/**
 * The files a node asked for, if they are the bundle's, each once, in the
 * bundle's order, each from an offset inside it (`from`: by name, for the
 * files it holds the start of); else why not.
 */
export function parseSendFiles(names: readonly string[], manifest: BundleManifest, from: Readonly<Record<string, bigint>> = {}): WantedFile[] | string {
  const known = new Set<string>(BUNDLE_FILES);
  const bad = names.find((name) => !known.has(name));
  if (bad !== undefined) return `the node asked for ${JSON.stringify(bad.slice(0, 40))}, which no bundle has`;
  const inOrder = BUNDLE_FILES.filter((name) => names.includes(name));
  if (inOrder.length !== names.length || inOrder.some((name, i) => names[i] !== name)) return `the node asked for ${names.slice(0, 8).join(", ")}: not each of the bundle's files once, in its order`;
  const stray = Object.keys(from).find((name) => !inOrder.includes(name as BundleFile));
  if (stray !== undefined) return `the node asked for ${JSON.stringify(stray.slice(0, 40))} from an offset, but not for the file`;
  const wanted: WantedFile[] = [];
  for (const name of inOrder) {
    const offset = from[name] ?? 0n;
    if (offset < 0n || offset >= BigInt(manifest.files[name].bytes)) return `the node asked for ${name} from byte ${offset}, which is not inside its ${manifest.files[name].bytes} bytes`;
    wanted.push({ name, from: Number(offset) });
  }
  return wanted;
}

export interface UpdateOptions {
  activate: boolean;
  allowDowngrade: boolean;
  /** Update a node that is not HEALTHY. */
  force: boolean;
  /** With activate: return once the node is back (see waitForUpdate). */
  wait: boolean;
  waitMs?: number;
}

export interface UpdateResult {
  node: string;
  slot: string;
  version: string;
  /** The node reboots into the slot now (else at its next reboot). */
  activated: boolean;
  /** With wait: seconds from the first byte sent to the node back, HEALTHY, at the version. */
  seconds?: number;
  /** With wait: when the node's boot at the new version began, as it reported. */
  bootMs?: number;
}

/**
 * What a node takes from its booted slot and what it is sent: "took system,
 * kernel (99.0 MiB) from its booted slot; sending initramfs (12.0 MiB of
 * 82.8 MiB: it had the first 70.8 MiB alike), version, cmdline (12.0 MiB)".
 */
export function describeSending(manifest: BundleManifest, files: readonly WantedFile[]): string {
  const taken = BUNDLE_FILES.filter((name) => !files.some((f) => f.name === name));
  const took = taken.length ? `took ${taken.join(", ")} (${mib(taken.reduce((sum, name) => sum + manifest.files[name].bytes, 0))}) from its booted slot; ` : "";
  if (files.length === 0) return `${took}nothing to send`;
  const sent = files.map(({ name, from }) => (from > 0 ? `${name} (${mib(manifest.files[name].bytes - from)} of ${mib(manifest.files[name].bytes)}: it had the first ${mib(from)} alike)` : name));
  return `${took}sending ${sent.join(", ")} (${mib(files.reduce((sum, { name, from }) => sum + manifest.files[name].bytes - from, 0))})`;
}

/** Refuses a node that is not fit to be updated (unless forced). */
function checkUpdatable(node: NodeSummary, force: boolean): void {
  if (force) return;
  if (node.health !== "HEALTHY") {
    throw new OperatorError(`${nameOf(node)} is ${node.health}${node.healthReason ? ` (${node.healthReason})` : ""}: an update would make that worse to tell apart; fix it first, or pass --force`);
  }
}

/** Streams `bundle` to node `id`; with options.activate and options.wait, waits until the node is back at its version. */
export async function updateNode(
  credentials: OwnerCredentials,
  settings: CallSettings,
  id: string,
  bundle: Bundle,
  options: UpdateOptions,
  say: { note: (line: string) => void; progress: (line: string) => void },
): Promise<UpdateResult> {
  const node = (await listNodesPatiently(credentials, settings)).find((n) => n.id === id);
  if (!node) throw new OperatorError(`the cluster has no node ${id}`);
  checkUpdatable(node, options.force);
  const started = Date.now();
  const before = node.bootMs;
  let slot = "";
  let installed = false;
  await withListedNode(credentials, node, async (client) => {
    let askFor: (files: readonly WantedFile[]) => void = () => {};
    const wanted = new Promise<readonly WantedFile[]>((resolve) => (askFor = resolve));
    try {
      for await (const answer of client.update(updateRequests(bundle, options, wanted), { timeoutMs: UPDATE_TIMEOUT_MS })) {
        slot = answer.slot;
        const written = Number(answer.writtenBytes);
        const total = Number(answer.totalBytes);
        if (answer.phase === UpdatePhase.RECEIVING) {
          const files = parseSendFiles(answer.sendFiles, bundle.manifest, answer.sendFrom);
          if (typeof files === "string") throw new OperatorError(`${nameOf(node)}: ${files}`);
          say.note(`${nameOf(node)}: ${describeSending(bundle.manifest, files)}`);
          askFor(files);
        } else if (answer.phase === UpdatePhase.WRITING) {
          say.progress(`${nameOf(node)}: writing ${bundle.manifest.version} to slot ${slot}: ${mib(written)} of ${mib(total)} (${total ? Math.floor((100 * written) / total) : 0} %)`);
        } else if (answer.phase === UpdatePhase.INSTALLED) {
          installed = true;
          say.note(`${nameOf(node)}: ${bundle.manifest.version} installed in slot ${slot}; it boots next, once, as a trial`);
        } else if (answer.phase === UpdatePhase.REBOOTING) {
          say.note(`${nameOf(node)} reboots into slot ${slot}`);
        }
      }
    } finally {
      // A call that ended before the node asked for anything sends nothing more.
      askFor([]);
    }
  });
  if (!installed) throw new OperatorError(`${nameOf(node)} ended the update without saying it was installed`);
  const result: UpdateResult = { node: id, slot, version: bundle.manifest.version, activated: options.activate };
  if (!options.activate || !options.wait) return result;
  const back = await waitForUpdate(credentials, id, before, bundle.manifest.version, { ...settings, progress: say.progress, ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}) });
  return { ...result, seconds: Math.round((Date.now() - started) / 100) / 10, ...(back.bootMs !== undefined ? { bootMs: back.bootMs } : {}) };
}

/**
 * Waits until node `id` has booted again (a boot after `before`) and is
 * HEALTHY at `version`. If it comes back at another version and reports
 * that `version` failed, throws an OperatorError with the node's reason:
 * the trial was rolled back.
 */
export function waitForUpdate(credentials: OwnerCredentials, id: string, before: number | undefined, version: string, settings: CallSettings & { waitMs?: number }): Promise<NodeSummary> {
  return waitForNode(
    credentials,
    id,
    (node) => {
      const rebooted = node.bootMs !== undefined && node.bootMs > (before ?? 0);
      if (rebooted && node.version === version && node.health === "HEALTHY") return true;
      if (rebooted && node.version !== version && node.updateFailure?.version === version) {
        throw new OperatorError(`${nameOf(node)} rolled back to ${node.version ?? "its old version"}: its update to ${version} failed: ${node.updateFailure.reason}`);
      }
      return rebooted ? `${nameOf(node)} booted again at ${node.version ?? "an unknown version"}, its health is ${node.health}` : `${nameOf(node)} has not booted again yet (${node.health})`;
    },
    { ...settings, what: `back at ${version}` },
  );
}

export interface RollbackResult {
  node: string;
  slot: string;
  version: string;
  activated: boolean;
  /** With wait: seconds from the request to the node back, HEALTHY, on the slot's version. */
  seconds?: number;
}

/** Makes node `id` boot its other slot once, as a trial (now, with activate); with wait as well, waits until the node is back on it (see waitForUpdate). */
export async function rollbackNode(
  credentials: OwnerCredentials,
  settings: CallSettings,
  id: string,
  options: { force: boolean; activate: boolean; wait?: boolean; waitMs?: number },
  say?: { note: (line: string) => void; progress: (line: string) => void },
): Promise<RollbackResult> {
  const node = (await listNodesPatiently(credentials, settings)).find((n) => n.id === id);
  if (!node) throw new OperatorError(`the cluster has no node ${id}`);
  const started = Date.now();
  const answer = await withListedNode(credentials, node, (client) => client.rollback({ force: options.force, activate: options.activate }, { timeoutMs: settings.timeoutMs }));
  const result: RollbackResult = { node: id, slot: answer.slot, version: answer.version, activated: options.activate };
  if (!options.activate || !options.wait) return result;
  say?.note(`${nameOf(node)} reboots into slot ${answer.slot} (${answer.version})`);
  await waitForUpdate(credentials, id, node.bootMs, answer.version, { ...settings, ...(say ? { progress: say.progress } : {}), ...(options.waitMs !== undefined ? { waitMs: options.waitMs } : {}) });
  return { ...result, seconds: Math.round((Date.now() - started) / 100) / 10 };
}
