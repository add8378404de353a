// NodeManagement: the owner's view into one node. Logs, services, power,
// its etcd member (status, defragmentation), its system slots (update,
// rollback), and its Kubernetes image store (images.ts).

import type { NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import { LogLevel, LogEntrySchema, UpdatePhase } from "../../proto/gen/api/node_management_pb.ts";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Logger } from "../log/mod.ts";
import { BOOTS_KEPT, matches, type LogFilter, type LogTree, type PastBoot, type TreeEntry } from "../logtree/mod.ts";
import { WIRE_LEVELS, levelOfWire } from "./client/mod.ts";
import { AbortedError, FailedPreconditionError, InvalidArgumentError, NotFoundError, quote, ResourceExhaustedError, type ServiceImpl, type ServicePolicy } from "../rpc/mod.ts";
import { defragment, memberStatus, type EtcdMember } from "../consensus/mod.ts";
import type { RunnableDump } from "../supervisor/mod.ts";
import type { ConsensusRecovery, RecoveryPlan } from "../roleserve/mod.ts";
import { BundleError, parseBundleManifest, type BundleFile, type SlotControl, type SlotWriter } from "../update/mod.ts";
import { imageCalls, type ImageDeps } from "./images.ts";

/** Only the owner manages nodes; nodes never call each other here. */
export const NODE_MANAGEMENT_POLICY: ServicePolicy<typeof NodeManagement> = {
  getLogs: "owner",
  getServices: "owner",
  reboot: "owner",
  powerOff: "owner",
  getEtcdStatus: "owner",
  defragmentEtcd: "owner",
  recoverConsensus: "owner",
  reset: "owner",
  update: "owner",
  rollback: "owner",
  importImages: "owner",
  listImages: "owner",
};

export type PowerRequest = "reboot" | "poweroff";

/** Followers served at once; more are refused (each holds a queue of entries). */
export const MAX_FOLLOWERS = 16;
/** The largest backlog one call may ask for. */
export const MAX_BACKLOG = 100_000;
/** Entries per response message. */
export const ENTRIES_PER_MESSAGE = 200;
const MAX_PATH_CHARS = 256;
const PATH_PATTERN = /^[a-z0-9_-]+(\.[a-z0-9_-]+)*$/i;
/** How long after answering a power request the node acts on it, so the answer gets out first. */
export const POWER_DELAY_MS = 200;
/** The largest bundle.json a first update request may carry. */
export const MAX_BUNDLE_MANIFEST_CHARS = 16 * 1024;
/** Progress goes back to the caller every this many bytes written. */
export const UPDATE_PROGRESS_EVERY_BYTES = 8 * 1024 * 1024;
/** How far ahead of the node's writing the owner may send an update's bytes (HTTP/2 flow control). */
export const UPDATE_RECEIVE_WINDOW_BYTES = 8 * 1024 * 1024;

export interface NodeManagementDeps extends ImageDeps {
  logs: LogTree;
  /** The supervision tree, as data. */
  services: () => RunnableDump[];
  /** Powers the node off or reboots it, through the same path as the ACPI button. */
  power: (action: PowerRequest, why: string) => void;
  /** This node's etcd member while it serves (a client of it, and its quota); undefined when it runs none. */
  etcd?: () => { member: EtcdMember; quotaBytes: number } | undefined;
  /** Recovery from a lost quorum through this node's etcd member (internal/roleserve/consensus_recovery.ts). */
  recovery?: Pick<ConsensusRecovery, "plan" | "start">;
  /** A past boot's kept logs (1: the boot before this one), from the data partition; undefined if not kept. */
  pastBoot?: (age: number) => PastBoot | undefined;
  /** Makes the node forget its cluster (internal/cluster/reset.ts); what it erased. The node reboots after. */
  reset?: (wipe: boolean) => Promise<string[]>;
  /** The node's system slots (a VM's); absent for a node process, which has none. */
  slots?: SlotControl;
  /** Where the service notes what it does to the node itself (an update written, or refused). */
  logger?: Logger;
}

/** A bundle refused, as the status code that says whose fault it is. */
function bundleRefusal(err: unknown): unknown {
  if (!(err instanceof BundleError)) return err;
  return err.kind === "precondition" ? new FailedPreconditionError(err.message) : new InvalidArgumentError(err.message);
}

type WireEntry = MessageInitShape<typeof LogEntrySchema>;

function toWire(entry: TreeEntry): WireEntry {
  return {
    path: entry.path,
    timeMs: BigInt(entry.time.getTime()),
    level: WIRE_LEVELS[entry.level],
    message: entry.message,
    fields: entry.fields.map(([key, value]) => ({ key, value })),
  };
}

function* batches(entries: TreeEntry[]): Iterable<{ entries: WireEntry[] }> {
  for (let i = 0; i < entries.length; i += ENTRIES_PER_MESSAGE) yield { entries: entries.slice(i, i + ENTRIES_PER_MESSAGE).map(toWire) };
}

export function nodeManagementService(deps: NodeManagementDeps): ServiceImpl<typeof NodeManagement> {
  let followers = 0;
  let defragmenting = false;
  let recovering = false;
  let resetting = false;
  let updating = false;
  const localEtcd = () => {
    const etcd = deps.etcd?.();
    if (!etcd) throw new FailedPreconditionError("this node runs no etcd member (it holds no consensus role, or its member is not serving yet)");
    return etcd;
  };
  return {
    ...imageCalls(deps),
    async *getLogs(request, ctx) {
      if (request.path.length > MAX_PATH_CHARS) throw new InvalidArgumentError(`path: ${request.path.length} characters, more than ${MAX_PATH_CHARS}`);
      if (request.path !== "" && !PATH_PATTERN.test(request.path)) {
        throw new InvalidArgumentError(`path: ${quote(request.path)} is not a dotted path like root.roleserve.controlplane`);
      }
      if (!Number.isInteger(request.backlog) || request.backlog < -1 || request.backlog > MAX_BACKLOG) {
        throw new InvalidArgumentError(`backlog: ${request.backlog}; use -1 (all kept), 0, or up to ${MAX_BACKLOG} entries`);
      }
      const minLevel = levelOfWire(request.minLevel);
      if (request.minLevel !== LogLevel.UNSPECIFIED && minLevel === undefined) throw new InvalidArgumentError(`min_level: unknown level ${request.minLevel}`);
      const filter: LogFilter = { path: request.path, subtree: request.subtree || request.path === "", ...(minLevel ? { minLevel } : {}) };
      if (!Number.isInteger(request.boot) || request.boot > 0 || request.boot <= -BOOTS_KEPT) {
        throw new InvalidArgumentError(`boot: ${request.boot}; use 0 (this boot) down to ${-(BOOTS_KEPT - 1)}`);
      }
      if (request.boot < 0) {
        if (request.follow) throw new InvalidArgumentError("a past boot cannot be followed; leave out follow, or ask for boot 0");
        const past = deps.pastBoot?.(-request.boot);
        if (!past) throw new NotFoundError(`this node kept no boot ${request.boot}: it has not booted that often since its data partition was set up`);
        const kept = past.entries.filter((e) => matches(filter, e));
        const chosen = request.backlog === -1 ? kept : request.backlog === 0 ? [] : kept.slice(-request.backlog);
        const pastBoot = {
          bootMs: BigInt(past.header.bootMs),
          version: past.header.version,
          endedMs: BigInt(past.header.end?.timeMs ?? 0),
          endCause: past.header.end?.cause ?? "",
          skipped: past.skipped,
        };
        let first = true;
        for (const batch of batches(chosen)) {
          yield first ? { ...batch, pastBoot } : batch;
          first = false;
        }
        if (first) yield { entries: [], pastBoot };
        return;
      }
      if (request.follow && followers >= MAX_FOLLOWERS) throw new ResourceExhaustedError(`this node already serves ${MAX_FOLLOWERS} log followers`);
      // Subscribe before reading the backlog, so nothing falls between the two.
      const live = request.follow ? deps.logs.follow(filter, ctx.signal)[Symbol.asyncIterator]() : undefined;
      if (live) followers++;
      try {
        const backlog = deps.logs.backlog(filter, request.backlog);
        const lastBacklogged = backlog.at(-1)?.seq ?? 0;
        yield* batches(backlog);
        if (!live) return;
        for (;;) {
          const next = await live.next();
          if (next.done) return;
          if (next.value.seq <= lastBacklogged && next.value.path !== "logtree") continue;
          yield { entries: [toWire(next.value)] };
        }
      } finally {
        if (live) {
          followers--;
          await live.return?.();
        }
      }
    },

    async getServices() {
      return {
        services: deps.services().map((d) => ({
          path: d.path,
          state: d.state,
          restarts: d.restarts,
          lastError: d.lastError ?? "",
          sinceMs: BigInt(d.sinceMs),
        })),
      };
    },

    async reboot() {
      setTimeout(() => deps.power("reboot", "owner asked through NodeManagement.Reboot"), POWER_DELAY_MS);
      return {};
    },

    async powerOff() {
      setTimeout(() => deps.power("poweroff", "owner asked through NodeManagement.PowerOff"), POWER_DELAY_MS);
      return {};
    },

    async getEtcdStatus() {
      const etcd = localEtcd();
      const status = await memberStatus(etcd.member);
      return {
        memberId: status.memberId,
        leaderId: status.leaderId,
        isLearner: status.isLearner,
        version: status.version,
        dbSizeBytes: BigInt(status.dbSizeBytes),
        dbSizeInUseBytes: BigInt(status.dbSizeInUseBytes),
        revision: BigInt(status.revision),
        raftTerm: BigInt(status.raftTerm),
        raftIndex: BigInt(status.raftIndex),
        alarms: status.alarms,
        errors: status.errors,
        quotaBytes: BigInt(etcd.quotaBytes),
      };
    },

    async defragmentEtcd() {
      const etcd = localEtcd();
      if (defragmenting) throw new AbortedError("this node's etcd member is being defragmented already; try again when that call has answered");
      defragmenting = true;
      const started = performance.now();
      try {
        const done = await defragment(etcd.member);
        return { beforeBytes: BigInt(done.beforeBytes), afterBytes: BigInt(done.afterBytes), tookMs: BigInt(Math.round(performance.now() - started)) };
      } finally {
        defragmenting = false;
      }
    },

    async reset(request) {
      if (!deps.reset) throw new FailedPreconditionError("this node cannot be reset");
      if (resetting) throw new AbortedError("this node is being reset already");
      resetting = true;
      const erased = await deps.reset(request.wipe).catch((err: unknown) => {
        resetting = false;
        throw err;
      });
      setTimeout(() => deps.power("reboot", `reset by the owner through NodeManagement.Reset${request.wipe ? " (wiped)" : ""}`), POWER_DELAY_MS);
      return { erased };
    },

    async *update(requests, ctx) {
      const slots = deps.slots;
      if (!slots) throw new FailedPreconditionError("this node has no system slots to update (a node process runs from its host's files)");
      if (updating) throw new AbortedError("an update is being written to this node already; wait for it to end");
      updating = true;
      let writer: SlotWriter | undefined;
      try {
        const stream = requests[Symbol.asyncIterator]();
        const first = await stream.next();
        if (first.done) throw new InvalidArgumentError("the update ended before its first request");
        const head = first.value;
        if (head.bundleManifest === "") throw new InvalidArgumentError("the first request carries no bundle_manifest");
        if (head.bundleManifest.length > MAX_BUNDLE_MANIFEST_CHARS) throw new InvalidArgumentError(`bundle_manifest: ${head.bundleManifest.length} characters, more than ${MAX_BUNDLE_MANIFEST_CHARS}`);
        if (head.data.length > 0) throw new InvalidArgumentError("the first request carries data; send the bundle's bytes in the requests after it");
        writer = await slots.beginUpdate(parseBundleManifest(head.bundleManifest), head.allowDowngrade);
        deps.logger?.info(`writing ${writer.manifest.version} into slot ${writer.slot}`, { bytes: writer.total });
        const progress = (phase: UpdatePhase) => ({ phase, writtenBytes: BigInt(writer!.progress.written), totalBytes: BigInt(writer!.total), slot: writer!.slot, version: writer!.manifest.version });
        yield progress(UpdatePhase.WRITING);
        let reported = 0;
        // What the booted slot holds as well is copied here, not sent.
        for await (const _ of writer.takeFromBootedSlot()) {
          ctx.signal.throwIfAborted();
          if (writer.progress.written - reported >= UPDATE_PROGRESS_EVERY_BYTES) {
            reported = writer.progress.written;
            yield progress(UpdatePhase.WRITING);
          }
        }
        // The owner may send well ahead of what has been written: a busy
        // emulated node answers slowly, and the default 64 KiB window held
        // a bundle to 0.27 MB/s.
        ctx.widenReceiveWindow(UPDATE_RECEIVE_WINDOW_BYTES);
        const taking = writer;
        const from = (name: BundleFile) => taking.receiveFrom(name);
        const receiving = writer.toReceive.map((name) => (from(name) > 0 ? `${name} from byte ${from(name)}` : name));
        deps.logger?.info(`slot ${writer.slot}: took ${writer.taken.join(", ") || "nothing"} from the booted slot (${writer.takenBytes} bytes in all); receiving ${receiving.join(", ") || "nothing"}`);
        const sendFrom = Object.fromEntries(writer.toReceive.filter((name) => from(name) > 0).map((name) => [name, BigInt(from(name))]));
        yield { ...progress(UpdatePhase.RECEIVING), sendFiles: [...writer.toReceive], sendFrom };
        for (;;) {
          const next = await stream.next();
          if (next.done) break;
          if (next.value.bundleManifest !== "") throw new InvalidArgumentError("only the first request carries a bundle_manifest");
          ctx.signal.throwIfAborted();
          await writer.write(next.value.data);
          if (writer.progress.written - reported >= UPDATE_PROGRESS_EVERY_BYTES) {
            reported = writer.progress.written;
            yield progress(UpdatePhase.WRITING);
          }
        }
        ctx.signal.throwIfAborted();
        await writer.finish();
        deps.logger?.info(`installed ${writer.manifest.version} in slot ${writer.slot}: it boots next, once, as a trial`);
        yield progress(UpdatePhase.INSTALLED);
        if (head.activate) {
          yield progress(UpdatePhase.REBOOTING);
          setTimeout(() => deps.power("reboot", `owner updated slot ${writer!.slot} to ${writer!.manifest.version} through NodeManagement.Update and activated it`), POWER_DELAY_MS);
        }
      } catch (err) {
        if (writer) deps.logger?.warn(`the update of slot ${writer.slot} to ${writer.manifest.version} ended unfinished: ${(err as Error)?.message ?? String(err)}`);
        await writer?.abort();
        throw bundleRefusal(err);
      } finally {
        updating = false;
      }
    },

    async rollback(request) {
      const slots = deps.slots;
      if (!slots) throw new FailedPreconditionError("this node has no system slots to roll back (a node process runs from its host's files)");
      if (updating) throw new AbortedError("an update is being written to this node; wait for it to end");
      const next = await slots.rollback(request.force).catch((err: unknown) => {
        throw bundleRefusal(err);
      });
      if (request.activate) setTimeout(() => deps.power("reboot", `owner rolled back to slot ${next.slot} (${next.version}) through NodeManagement.Rollback`), POWER_DELAY_MS);
      return next;
    },

    async recoverConsensus(request) {
      const recovery = deps.recovery;
      if (!recovery) throw new FailedPreconditionError("this node cannot recover consensus (it runs no control plane)");
      if (request.dryRun) return { ...planToWire(await recovery.plan()), started: false };
      if (recovering) throw new AbortedError("a recovery is being started on this node already; look at its etcd status");
      recovering = true;
      try {
        return { ...planToWire(await recovery.start(request.force)), started: true };
      } finally {
        recovering = false;
      }
    },
  };
}

function planToWire(plan: RecoveryPlan) {
  return {
    survivor: plan.survivor,
    memberId: plan.memberId,
    leaderId: plan.leaderId,
    revision: BigInt(plan.revision),
    quorum: plan.quorum,
    quorumReason: plan.quorumReason,
    lost: plan.lost.map((m) => ({ name: m.name, peerUrl: m.peerUrls[0] ?? "", memberId: BigInt(m.id).toString(16) })),
  };
}
