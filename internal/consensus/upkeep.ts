// Keeping a member's database in shape: bounded history, bounded size, and
// a way back from a full quota, without an apiserver or an operator.
//
//   etcd flags (etcdArgs)     --auto-compaction-mode=periodic, retention AUTO_COMPACTION_RETENTION:
//                             history older than that is compacted away, with or without an apiserver
//                             --quota-backend-bytes=quotaFor(data partition): NOSPACE before the disk fills
//
//   upkeepRunnable (every consensus node, against its own member; every UPKEEP_INTERVAL_MS)
//     memberStatus ──▶ NOSPACE alarm? ──▶ compact to the current revision, defragment,
//                  │                      disarm once in use < QUOTA_CLEAR_FRACTION of the quota
//                  └─▶ fragmented? (needsDefrag) ──▶ defragment this member
//     and a status line: size, in use, revision, the alarms (a NOSPACE that stays is a
//     failure of the line, so it shows where health shows)
//
// Defragmenting blocks the member it runs on for as long as it takes
// (reads and writes wait); each node does only its own member, so the
// cluster keeps a quorum while one member defragments.

import type { Etcd3 } from "etcd3";
import { formatBytes } from "../log/mod.ts";
import { sleep, type Runnable } from "../supervisor/mod.ts";

/** How much history auto-compaction keeps (etcd's periodic mode: compacts every retention/10). */
export const AUTO_COMPACTION_RETENTION = "1h";
/** The quota's share of the data partition: etcd says NOSPACE long before the disk is full. */
export const QUOTA_SHARE_OF_PARTITION = 0.25;
/** The quota's bounds, whatever the partition: etcd's own default is 2 GiB, its recommended maximum 8 GiB. */
export const MIN_QUOTA_BYTES = 64 * 1024 * 1024;
export const MAX_QUOTA_BYTES = 8 * 1024 * 1024 * 1024;
/** How often each node looks at its member. */
export const UPKEEP_INTERVAL_MS = 5 * 60_000;
/** A member is defragmented when at least this share of its file is free pages... */
export const DEFRAG_FREE_SHARE = 0.5;
/** ...and those free pages are at least this many bytes (a small file is not worth blocking the member). */
export const DEFRAG_MIN_FREE_BYTES = 32 * 1024 * 1024;
/** A NOSPACE alarm is disarmed once the database in use is below this share of the quota. */
export const QUOTA_CLEAR_FRACTION = 0.8;

/** etcd's alarm types (etcdserverpb.AlarmType). */
const ALARM_NAMES: Record<number, string> = { 1: "NOSPACE", 2: "CORRUPT" };
const NOSPACE = 1;
const ALARM_GET = 0;
const ALARM_DEACTIVATE = 2;

/** The etcd quota for a data partition of `partitionBytes`. */
export function quotaFor(partitionBytes: number): number {
  return Math.round(Math.min(MAX_QUOTA_BYTES, Math.max(MIN_QUOTA_BYTES, partitionBytes * QUOTA_SHARE_OF_PARTITION)));
}

/** One member, as it answers for itself. */
export interface MemberStatus {
  /** Its member ID, hex (as etcdctl prints it). */
  memberId: string;
  /** The member it takes for the raft leader, hex; "" if it knows none. */
  leaderId: string;
  isLearner: boolean;
  version: string;
  /** The database file's size, and the part of it in use. */
  dbSizeBytes: number;
  dbSizeInUseBytes: number;
  revision: number;
  raftTerm: number;
  raftIndex: number;
  /** The cluster's active alarms, as "NOSPACE on <member id>". */
  alarms: string[];
  /** What the member reports about its own health (etcd's status errors). */
  errors: string[];
}

const hex = (id: string | number) => BigInt(id).toString(16);

/**
 * The member itself, not a key space: its status, alarms, defragmentation,
 * snapshots and the compaction of its history. What the node's upkeep,
 * node management and backups are handed (LocalConsensus.member), so that
 * none of them holds a client that could read or write a key.
 */
export interface EtcdMember {
  maintenance: Etcd3["maintenance"];
  kv: Pick<Etcd3["kv"], "compact">;
}

/** `client`'s member, without its key space. */
export function etcdMember(client: Etcd3): EtcdMember {
  return { maintenance: client.maintenance, kv: { compact: (request, options) => client.kv.compact(request, options) } };
}

/** `client`'s member's status, and the cluster's alarms. */
export async function memberStatus(client: EtcdMember): Promise<MemberStatus> {
  const status = await client.maintenance.status();
  const alarms = await client.maintenance.alarm({ action: ALARM_GET, memberID: 0 });
  return {
    memberId: hex(status.header.member_id),
    leaderId: status.leader === "0" ? "" : hex(status.leader),
    isLearner: status.isLearner,
    version: status.version,
    dbSizeBytes: Number(status.dbSize),
    dbSizeInUseBytes: Number(status.dbSizeInUse),
    revision: Number(status.header.revision),
    raftTerm: Number(status.raftTerm),
    raftIndex: Number(status.raftIndex),
    alarms: (alarms.alarms ?? []).map((a) => `${ALARM_NAMES[alarmNumber(a.alarm)] ?? String(a.alarm)} on ${hex(a.memberID)}`),
    // Active alarms are in the errors too ("memberID:… alarm:NOSPACE"); they are listed above.
    errors: (status.errors ?? []).filter((e) => !/\balarm:/.test(e)),
  };
}

/** etcd3 gives enums as numbers or as names ("Nospace"), depending on the path. */
function alarmNumber(alarm: unknown): number {
  if (typeof alarm === "number") return alarm;
  const byName = Object.entries(ALARM_NAMES).find(([, name]) => name === String(alarm).toUpperCase());
  return byName ? Number(byName[0]) : -1;
}

/** Whether a member's file has enough free pages to be worth defragmenting. */
export function needsDefrag(status: Pick<MemberStatus, "dbSizeBytes" | "dbSizeInUseBytes">): boolean {
  const free = status.dbSizeBytes - status.dbSizeInUseBytes;
  return free >= DEFRAG_MIN_FREE_BYTES && free >= status.dbSizeBytes * DEFRAG_FREE_SHARE;
}

/** Defragments `client`'s member; its file's size before and after. */
export async function defragment(client: EtcdMember): Promise<{ beforeBytes: number; afterBytes: number }> {
  const before = Number((await client.maintenance.status()).dbSize);
  await client.maintenance.defragment();
  const after = Number((await client.maintenance.status()).dbSize);
  return { beforeBytes: before, afterBytes: after };
}

/** The status line's text for a member. */
export function describeMember(status: MemberStatus): string {
  const parts = [
    `member ${status.memberId}${status.isLearner ? " (learner)" : status.leaderId === status.memberId ? " (leader)" : ""}`,
    `${formatBytes(status.dbSizeBytes)} on disk, ${formatBytes(status.dbSizeInUseBytes)} in use`,
    `revision ${status.revision}`,
  ];
  if (status.alarms.length) parts.push(`alarms: ${status.alarms.join(", ")}`);
  if (status.errors.length) parts.push(`errors: ${status.errors.join("; ")}`);
  return parts.join(", ");
}

/**
 * Frees a member that hit its quota: compacts all history (the key space
 * stays as it is), defragments, and disarms NOSPACE once what is in use is
 * well below the quota. Returns what it found and did. A database that is
 * full of live keys stays full: then the alarm stays, and says so.
 */
export async function recoverFromNoSpace(client: EtcdMember, quotaBytes: number): Promise<{ compactedTo: number; afterBytes: number; disarmed: boolean }> {
  const status = await client.maintenance.status();
  const revision = Number(status.header.revision);
  try {
    await client.kv.compact({ revision, physical: true });
  } catch (err) {
    // Compacted to this revision already (by auto-compaction, or an earlier round).
    if (!/required revision has been compacted/.test((err as Error).message)) throw err;
  }
  await client.maintenance.defragment();
  const after = await client.maintenance.status();
  const inUse = Number(after.dbSizeInUse);
  const disarmed = inUse < quotaBytes * QUOTA_CLEAR_FRACTION;
  if (disarmed) {
    // Deactivated one by one, each with its member: an alarm is keyed by both.
    const active = await client.maintenance.alarm({ action: ALARM_GET, memberID: 0 });
    for (const alarm of active.alarms ?? []) {
      if (alarmNumber(alarm.alarm) === NOSPACE) await client.maintenance.alarm({ action: ALARM_DEACTIVATE, memberID: alarm.memberID, alarm: NOSPACE });
    }
  }
  return { compactedTo: revision, afterBytes: Number(after.dbSize), disarmed };
}

export interface UpkeepOptions {
  /** The node's own member's client (the control plane's). */
  client: () => Promise<EtcdMember>;
  quotaBytes: number;
  /** The "etcd-upkeep" line: running, or failing while a NOSPACE alarm stays. */
  report: (state: "running" | "failing", message: string) => void;
  intervalMs?: number;
}

/** Looks after the node's member every interval; see the package's diagram. */
export function upkeepRunnable(options: UpkeepOptions): Runnable {
  return async (ctx) => {
    const client = await options.client();
    ctx.signalHealthy();
    for (;;) {
      try {
        let status = await memberStatus(client);
        if (status.alarms.some((a) => a.startsWith("NOSPACE"))) {
          ctx.logger.warn("etcd is out of its quota (NOSPACE): compacting its history and defragmenting", { quota: formatBytes(options.quotaBytes), status: describeMember(status) });
          const done = await recoverFromNoSpace(client, options.quotaBytes);
          ctx.logger.info(done.disarmed ? "NOSPACE alarm cleared" : "NOSPACE alarm stays: the live keys alone fill the quota", { compactedTo: done.compactedTo, size: formatBytes(done.afterBytes) });
          status = await memberStatus(client);
        } else if (needsDefrag(status)) {
          const done = await defragment(client);
          ctx.logger.info("defragmented etcd", { before: formatBytes(done.beforeBytes), after: formatBytes(done.afterBytes) });
          status = await memberStatus(client);
        }
        const full = status.alarms.some((a) => a.startsWith("NOSPACE"));
        options.report(full ? "failing" : "running", `${describeMember(status)}, quota ${formatBytes(options.quotaBytes)}`);
      } catch (err) {
        if (ctx.signal.aborted) throw err;
        ctx.logger.warn("could not look after etcd", { error: (err as Error).message });
      }
      await sleep(options.intervalMs ?? UPKEEP_INTERVAL_MS, ctx.signal);
    }
  };
}
