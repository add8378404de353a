// The audit trail: who did what to the cluster, and what the curator leader
// saw happen, as ClusterEvents in etcd under EVENTS_PREFIX.
//
//   every call to a curator ──rpc audit hook (internal/rpc/service.ts)──▶ AuditTrail.tap
//     Management writes and secret reads (AUDITED): the caller, the node
//       acted on, what was asked, and the result (OK or the status)
//     any call refused for who made it: at most REFUSALS_PER_MINUTE per
//       caller and REFUSALS_PER_MINUTE_OVERALL from everyone a minute,
//       then one line counting the rest (rpc's RefusalBudget)
//   the leader's health watch (health_events.ts) ──▶ AuditTrail.record
//     a node's health changing, a node booting
//          │ two queues, written one at a time, calls first: what was done
//          │ (calls, health, nodes' reports of calls) is never dropped;
//          │ refusals wait in a bounded queue of their own, whose oldest go
//          ▼ when it is full (said, with that cause)
//   events/<time ms, 15 digits>-<random> ──▶ Management.GetEvents, ctl events [-f]
//
// Keys sort by time, so the newest are a range read away. The trail keeps
// MAX_EVENTS: every PRUNE_EVERY writes, the oldest beyond it go. Only
// curators write here (etcd serves consensus members alone, and no API
// writes an event); the owner reads.

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { Range, type Namespace } from "etcd3";
import { randomBytes } from "node:crypto";
import { ClusterEventSchema, ClusterEvent_Kind, type ClusterEvent } from "../../proto/gen/api/management_pb.ts";
import type { ReportNodeManagementCallRequest } from "../../proto/gen/curator/curator_pb.ts";
import type { Logger } from "../log/mod.ts";
import { nodeIdFromPublicKey } from "../pki/mod.ts";
import { actorOf, callResult, describeRequest, encodable, InvalidArgumentError, isRefusal, leftOutLine, MAX_DETAIL_CHARS, quote, RefusalBudget, type AuditedCall } from "../rpc/mod.ts";

export const EVENTS_PREFIX = "events/";
/** How many events the trail keeps. */
export const MAX_EVENTS = 10_000;
/** How often (in writes) the oldest beyond MAX_EVENTS are deleted. */
const PRUNE_EVERY = 100;
/** Refusals waiting to be written; beyond this the oldest are dropped. */
const MAX_QUEUED_REFUSALS = 1_000;
/** Refusals recorded per caller and minute; the rest are counted in one line. */
export const REFUSALS_PER_MINUTE = 5;
/** Refusals recorded from everyone in a minute; the rest are counted in one line. */
export const REFUSALS_PER_MINUTE_OVERALL = 60;
/** Refusals one node may report a minute (it bounds its own too: report_calls.ts). */
export const NODE_REPORTS_PER_MINUTE = 30;
/** Calls (not refusals) one node may report a minute: the owner's reboots, updates and resets are rare, a node that floods its reports is not believed. */
export const NODE_CALL_REPORTS_PER_MINUTE = 120;
const NODE_METHOD = /^NodeManagement\/[A-Z][A-Za-z]{1,40}$/;

/** The Management calls whose every outcome is recorded: they change the cluster or hand out a secret. */
export const AUDITED_METHODS: ReadonlySet<string> = new Set([
  "Management/GetRegisterTicket",
  "Management/ApproveNode",
  "Management/UpdateNodeRoles",
  "Management/GetEtcdCredentials",
  "Management/DeleteNode",
  "Management/UndeleteNode",
  "Management/UpdateNodeLabels",
  "Management/GetKubernetesCredentials",
  "Management/GetMetricsCredentials",
  "Management/Backup",
  "Management/SetBackupSchedule",
  "Management/SetContainerRegistry",
  "Management/SetContainerRegistryCredentials",
  "Management/RemoveContainerRegistry",
  // By name only: a manifest's objects are redacted (SECRET_FIELD), since a Secret may be among them.
  "Management/ApplyManifest",
  "Management/DeleteManifest",
]);

/** Calls whose public key is a new key of the owner's, not a node's: they are about no node. */
const OWNER_KEY_METHODS: ReadonlySet<string> = new Set(["Management/GetKubernetesCredentials", "Management/GetEtcdCredentials", "Management/GetMetricsCredentials"]);

/** The node a request is about: its `id`, its public key's node ID, or the node a backup schedule names. */
export function targetOf(request: unknown): string {
  if (!request || typeof request !== "object") return "";
  const r = request as { id?: unknown; publicKey?: unknown; schedule?: { nodeId?: unknown } };
  if (typeof r.id === "string" && r.id) return encodable(r.id, 40);
  if (r.publicKey instanceof Uint8Array && r.publicKey.length === 32) {
    try {
      return nodeIdFromPublicKey(r.publicKey);
    } catch {
      return "";
    }
  }
  if (typeof r.schedule?.nodeId === "string") return encodable(r.schedule.nodeId, 40);
  return "";
}

/** Orders one curator's events within a millisecond. */
let sequence = 0;

/** A time-ordered key for an event at `timeMs`: its time, this curator's sequence, and random bytes against another curator's same time. */
export function eventKey(timeMs: number): string {
  sequence = (sequence + 1) % 1_000_000;
  return `${EVENTS_PREFIX}${String(Math.max(0, Math.floor(timeMs))).padStart(15, "0")}-${String(sequence).padStart(6, "0")}-${randomBytes(4).toString("hex")}`;
}

export class AuditTrail {
  /** What was done: calls, health, nodes' reports of calls. Never dropped. */
  private readonly calls: ClusterEvent[] = [];
  /** Refusals and their counting lines: bounded, the oldest dropped. */
  private readonly refusals: ClusterEvent[] = [];
  private draining = false;
  private dropped = 0;
  private readonly refusalBudget: RefusalBudget;
  private writes = 0;
  /** Per rate-limited key (a refusing caller, a reporting node): this minute and the count in it. */
  private readonly allowances = new Map<string, { minute: number; count: number }>();

  constructor(
    private readonly etcd: Namespace,
    private readonly logger: Logger,
    private readonly mapError: (err: unknown) => unknown = (e) => e,
    private readonly now: () => number = () => Date.now(),
  ) {
    this.refusalBudget = new RefusalBudget(REFUSALS_PER_MINUTE, REFUSALS_PER_MINUTE_OVERALL, now);
  }

  /** The rpc audit hook: records what AUDITED_METHODS and refusals call for. */
  tap(call: AuditedCall): void {
    const refused = call.error !== undefined && isRefusal(call.error);
    if (!refused && !AUDITED_METHODS.has(call.method)) return;
    const actor = actorOf(call.peer, call.remoteAddress);
    if (refused && !this.allowRefusal(actor)) return;
    this.record({
      kind: refused ? ClusterEvent_Kind.REFUSAL : ClusterEvent_Kind.CALL,
      actor,
      method: call.method,
      nodeId: OWNER_KEY_METHODS.has(call.method) ? "" : targetOf(call.request),
      detail: describeRequest(call.request),
      result: callResult(call.error, this.mapError),
    });
  }

  /**
   * A call to a node's own node management service, as that node reports
   * it: recorded about that node, with the caller it names marked as its
   * word. At most NODE_REPORTS_PER_MINUTE per node; what is over is
   * counted in one line.
   */
  fromNode(nodeId: string, report: Pick<ReportNodeManagementCallRequest, "method" | "caller" | "detail" | "result" | "refused">): void {
    if (!NODE_METHOD.test(report.method)) throw new InvalidArgumentError(`method: ${quote(report.method, 60)} is not NodeManagement/<Method>`);
    // Refusals and calls have budgets of their own: a flood of refusals never takes a call's place.
    const [key, budget, what] = report.refused ? [`refused:${nodeId}`, NODE_REPORTS_PER_MINUTE, "refused calls"] : [`calls:${nodeId}`, NODE_CALL_REPORTS_PER_MINUTE, "calls"];
    const kind = report.refused ? ClusterEvent_Kind.REFUSAL : ClusterEvent_Kind.CALL;
    if (
      !this.allow(key, budget, (over) =>
        this.record({ kind, actor: `${nodeId}`, nodeId, detail: `and ${over} more node management ${what} reported by ${nodeId} in that minute, not recorded one by one`, result: "" }),
      )
    )
      return;
    this.record({
      kind: report.refused ? ClusterEvent_Kind.REFUSAL : ClusterEvent_Kind.CALL,
      actor: `${encodable(report.caller, 100)} (as ${nodeId} reports)`,
      method: report.method,
      nodeId,
      detail: encodable(report.detail, MAX_DETAIL_CHARS - 1),
      result: encodable(report.result, MAX_DETAIL_CHARS - 1),
    });
  }

  /** Queues an event (stamped now) to be written: a refusal in the refusals' queue, anything else in the calls'. */
  record(event: { kind: ClusterEvent_Kind; actor: string; method?: string; nodeId?: string; detail?: string; result?: string }): void {
    const message = create(ClusterEventSchema, { ...event, timeMs: BigInt(this.now()) });
    if (event.kind === ClusterEvent_Kind.REFUSAL) {
      this.refusals.push(message);
      if (this.refusals.length > MAX_QUEUED_REFUSALS) {
        this.refusals.shift();
        this.dropped++;
      }
    } else this.calls.push(message);
    void this.drain();
  }

  /** Resolves once everything queued so far is written (tests, shutdown). */
  async flush(): Promise<void> {
    while (this.calls.length || this.refusals.length || this.draining) await Bun.sleep(5);
  }

  private allowRefusal(actor: string): boolean {
    const { admit, leftOut } = this.refusalBudget.admit(actor);
    if (leftOut) this.record({ kind: ClusterEvent_Kind.REFUSAL, actor: "", detail: leftOutLine(leftOut), result: "" });
    return admit;
  }

  /** At most `perMinute` a minute for `key`; when a minute ends with more, `counted` is told how many more. */
  private allow(key: string, perMinute: number, counted: (over: number) => void): boolean {
    const minute = Math.floor(this.now() / 60_000);
    const seen = this.allowances.get(key);
    if (!seen || seen.minute !== minute) {
      if (seen && seen.count > perMinute) counted(seen.count - perMinute);
      this.allowances.set(key, { minute, count: 1 });
      // Bounded: keys not seen in this minute are forgotten.
      if (this.allowances.size > 10_000) for (const [k, value] of this.allowances) if (value.minute !== minute) this.allowances.delete(k);
      return true;
    }
    seen.count++;
    return seen.count <= perMinute;
  }

  private async drain(): Promise<void> {
    if (this.draining) return;
    this.draining = true;
    try {
      for (;;) {
        // Calls first: refusals wait behind what was done.
        const queue = this.calls.length ? this.calls : this.refusals;
        const event = queue[0];
        if (!event) break;
        try {
          await this.etcd.put(eventKey(Number(event.timeMs))).value(Buffer.from(toBinary(ClusterEventSchema, event)));
          // The refusals' queue may have dropped its oldest meanwhile: take this one by identity.
          const at = queue.indexOf(event);
          if (at >= 0) queue.splice(at, 1);
        } catch (err) {
          this.logger.warn("could not record an event in the audit trail; trying again", { error: (err as Error).message, calls: this.calls.length, refusals: this.refusals.length });
          await Bun.sleep(1_000);
          continue;
        }
        if (++this.writes % PRUNE_EVERY === 0) await this.prune().catch((err: unknown) => this.logger.warn("could not prune the audit trail", { error: (err as Error).message }));
      }
      if (this.dropped) {
        const dropped = this.dropped;
        this.dropped = 0;
        this.logger.warn("refusals dropped from the audit trail: they came faster than etcd took them, and their queue was full", { dropped, queueBound: MAX_QUEUED_REFUSALS });
      }
    } finally {
      this.draining = false;
    }
  }

  /** Deletes the oldest events beyond MAX_EVENTS. */
  async prune(max = MAX_EVENTS): Promise<number> {
    const count = await this.etcd.getAll().prefix(EVENTS_PREFIX).count();
    if (count <= max) return 0;
    const oldest = await this.etcd
      .getAll()
      .prefix(EVENTS_PREFIX)
      .sort("Key", "Ascend")
      .limit(count - max)
      .keys();
    const last = oldest.at(-1);
    if (!last) return 0;
    // [first key of the prefix, last key to go]
    await this.etcd.delete().range(new Range(EVENTS_PREFIX, `${last}\0`));
    return oldest.length;
  }
}

/** Reads the trail's newest `last` events (about `nodeId`, if given), oldest first, and the etcd revision read at. */
export async function readEvents(etcd: Namespace, options: { last: number; nodeId?: string }): Promise<{ events: ClusterEvent[]; revision: number }> {
  const query = etcd.getAll().prefix(EVENTS_PREFIX).sort("Key", "Descend");
  const response = await (options.nodeId ? query : query.limit(options.last)).exec();
  const events = response.kvs.map((kv) => fromBinary(ClusterEventSchema, kv.value)).filter((e) => !options.nodeId || e.nodeId === options.nodeId);
  return { events: events.slice(0, options.last).reverse(), revision: Number(response.header.revision) };
}

/** Decodes a watched event's value; undefined for one that is not an event (never written by a curator). */
export function decodeEvent(value: Buffer): ClusterEvent | undefined {
  try {
    return fromBinary(ClusterEventSchema, value);
  } catch {
    return undefined;
  }
}
