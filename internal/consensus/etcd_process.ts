// Running the etcd member of this node as a supervised child process.

import { mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { describeSpace, freeSpace, waitForFreeSpace } from "../localstorage/mod.ts";
import { formatBytes } from "../log/mod.ts";
import { AUTO_COMPACTION_RETENTION, quotaFor } from "./upkeep.ts";
import { privateKeyPem } from "../pki/mod.ts";
import { hostPort } from "../rpc/mod.ts";
import { runProcess, sleep, type ParsedLine, type RunContext } from "../supervisor/mod.ts";
import type { EtcdTls } from "./certificates.ts";
import type { Etcd3 } from "etcd3";
import { connectEtcd } from "./etcd_client.ts";

/**
 * The etcd binary in the node image's initramfs, built from its Go module
 * (image/upstream). A node process runs the one in its system tree
 * (EtcdMemberOptions.binary).
 */
export const ETCD_BINARY = "/usr/bin/etcd";
/** etcdutl, where the build puts it: beside the etcd binary (a VM's system image has it at the same path below /system). */
export function etcdutlBeside(etcd: string = ETCD_BINARY): string {
  return join(dirname(etcd), "etcdutl");
}
export const ETCD_PEER_PORT = 2380;
export const ETCD_CLIENT_PORT = 2379;
/**
 * The free space etcd needs to start: one write-ahead log segment, which
 * etcd preallocates (64 MiB). With less, it would die at its next commit or
 * log cut, and start again only to die again. Only space that is free
 * counts, not the spare segment etcd preallocated before.
 */
export const ETCD_MIN_FREE_BYTES = 64 * 1024 * 1024;
/** How often readiness is probed when a probe failed. */
const READY_PROBE_INTERVAL_MS = 500;
/** How long etcd gets to say it serves clients before readiness is probed without that cue. */
const SERVING_LINE_WAIT_MS = 20_000;
/** etcd's log message once it serves clients (after it has published itself through raft). */
const SERVING_CLIENTS_MESSAGE = "serving client traffic securely";
/** etcd's log messages once it has applied a snapshot sent by the leader, and once it has published itself. */
const APPLIED_SNAPSHOT_MESSAGE = "applied snapshot";
const PUBLISHED_MESSAGE = "published local member to cluster through raft";
/**
 * How long after applying the leader's snapshot a member may take to
 * publish itself before it is taken to have lost its publish to the
 * snapshot, and run again (runEtcdMember). Published in time, it does so
 * within a few milliseconds of the snapshot here (one entry from the
 * leader); on a VM under emulation, within a second.
 */
export const PUBLISH_AFTER_SNAPSHOT_GRACE_MS = 2_000;
/**
 * What etcd says when the cluster has no member for it: it was removed
 * (while it ran, or while it was down: "permanently removed"), or it joins
 * a cluster that did not add it, or no longer has it ("member count is
 * unequal": the cluster's members and the ones it was told to join differ).
 */
const NOT_A_MEMBER_MESSAGES = [/the member has been permanently removed from the cluster/, /member count is unequal/];

/** etcd stopped because the cluster has no member for it (NOT_A_MEMBER_MESSAGES). */
export class EtcdNotAMemberError extends Error {}

/** Raft's clock: heartbeat interval (one tick) and election timeout, in ms; and how often etcd snapshots. */
export interface RaftTiming {
  heartbeatMs: number;
  electionMs: number;
  /** etcd's --snapshot-count: applied entries between two snapshots. */
  snapshotCount: number;
}

/**
 * A member that expects to be alone. It waits one election timeout
 * (randomised between 1x and 2x) before it elects itself, and etcd
 * shortens that only on a fresh single-node start, not on a restart
 * without a snapshot: with the shared timing every reboot of a one-node
 * cluster waited 2.5-5 s for its own vote. These are etcd's defaults.
 *
 * Even so, a restarted single member without a snapshot waits a whole
 * randomised election timeout (1-2 s): etcd 3.4 fast-forwards the election
 * ticks of a member that knows at start that it is alone, and without a
 * snapshot it learns its membership only while it replays its log, after
 * that check (its log says "starting initial election tick advance"
 * instead of "started as single-node; fast-forwarding election ticks").
 * So a member that expects to be alone snapshots every few entries, and
 * its next start finds one: the snapshot of a one-member cluster is small
 * (etcd's v2 store, which holds little more than the membership).
 *
 * If others join later, this member keeps the timing until its next start:
 * leading, it sends heartbeats more often and steps down when no quorum
 * answered within an election timeout (etcd's CheckQuorum); following,
 * pre-vote and CheckQuorum keep its shorter timeout from disturbing a
 * leader the others still hear. Until then it also snapshots every few
 * entries: a small file and an fsync each time.
 */
export const SOLO_RAFT_TIMING: RaftTiming = { heartbeatMs: 100, electionMs: 1_000, snapshotCount: 5 };
/** Members of a cluster of several, on slow (emulated) machines: elections must not flap. */
export const SHARED_RAFT_TIMING: RaftTiming = { heartbeatMs: 250, electionMs: 2_500, snapshotCount: 10_000 };

/** The raft timing for a member that expects `members` members (itself included). */
export function raftTimingFor(members: number): RaftTiming {
  return members <= 1 ? SOLO_RAFT_TIMING : SHARED_RAFT_TIMING;
}

export interface EtcdPeer {
  name: string;
  peerUrl: string;
}

export interface EtcdMemberOptions {
  /** The etcd binary (default ETCD_BINARY). */
  binary?: string;
  /** The member name: the node ID. */
  name: string;
  dataDir: string;
  /** Where TLS files are written for etcd to read. */
  tlsDir: string;
  /** The address other members reach this one at. */
  peerHost: string;
  /** The address the local client (the curator) connects to; loopback on nodes. */
  clientHost: string;
  /** More addresses for the client port (the node's address, for the owner's etcdctl). */
  extraClientHosts?: readonly string[];
  peerPort?: number;
  clientPort?: number;
  tls: EtcdTls;
  /** "new": create a cluster of initialCluster; "existing": join one (after being added as a member). */
  clusterState: "new" | "existing";
  /** All members including this one (for "existing": the current members plus this one). */
  initialCluster: EtcdPeer[];
  /** Called once etcd answers requests. */
  onReady?: () => void;
  /**
   * Makes the client of this member that the caller goes on to use; called
   * once etcd's process is spawned, so that etcd3's code (seconds to load
   * under emulation, the first time) loads while etcd starts, on a VM's
   * other vCPU. Readiness is checked through that client (its connection
   * made once). It should return the same client on every call.
   */
  client?: () => Promise<Etcd3>;
  /** Free space on the data directory's file system below which etcd is not started (default ETCD_MIN_FREE_BYTES). */
  minFreeBytes?: number;
  /** How many members the cluster has as far as this node knows (default: initialCluster's size); chooses the raft timing. */
  expectedMembers?: number;
  /** etcd's backend quota (default: memberQuota, from the data partition's size). */
  quotaBytes?: number;
  /**
   * Start as a one-member cluster from the existing data, whatever members
   * it lists (etcd's --force-new-cluster): recovery from a lost quorum
   * (internal/roleserve/consensus_recovery.ts). Harmless on a member that
   * is alone already.
   */
  forceNewCluster?: boolean;
}

/** The backend quota of a member whose data lives in `dataDir`: upkeep.ts' quotaFor of its file system's size. */
export function memberQuota(dataDir: string): number {
  return quotaFor(freeSpace(dirname(dataDir)).totalBytes);
}

export function peerUrl(host: string, port = ETCD_PEER_PORT): string {
  return `https://${hostPort(host, port)}`;
}

export function clientUrl(host: string, port = ETCD_CLIENT_PORT): string {
  return `https://${hostPort(host, port)}`;
}

function writeTlsFiles(dir: string, tls: EtcdTls): { ca: string; cert: string; key: string } {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const files = { ca: join(dir, "ca.pem"), cert: join(dir, "member.pem"), key: join(dir, "member.key") };
  writeFileSync(files.ca, tls.ca.toString());
  writeFileSync(files.cert, tls.certificate.toString());
  writeFileSync(files.key, privateKeyPem(tls.privateKey), { mode: 0o600 });
  return files;
}

/** etcd's command line for a member. */
export function etcdArgs(options: EtcdMemberOptions, files: { ca: string; cert: string; key: string }): string[] {
  const ownPeerUrl = peerUrl(options.peerHost, options.peerPort);
  const ownClientUrl = clientUrl(options.clientHost, options.clientPort);
  const clientUrls = [ownClientUrl, ...(options.extraClientHosts ?? []).map((h) => clientUrl(h, options.clientPort))].join(",");
  const timing = raftTimingFor(options.expectedMembers ?? options.initialCluster.length);
  return [
    `--name=${options.name}`,
    `--data-dir=${options.dataDir}`,
    `--listen-peer-urls=${ownPeerUrl}`,
    `--initial-advertise-peer-urls=${ownPeerUrl}`,
    `--listen-client-urls=${clientUrls}`,
    `--advertise-client-urls=${clientUrls}`,
    `--initial-cluster=${options.initialCluster.map((p) => `${p.name}=${p.peerUrl}`).join(",")}`,
    `--initial-cluster-state=${options.clusterState}`,
    "--initial-cluster-token=nodecore",
    "--client-cert-auth",
    `--trusted-ca-file=${files.ca}`,
    `--cert-file=${files.cert}`,
    `--key-file=${files.key}`,
    "--peer-client-cert-auth",
    `--peer-trusted-ca-file=${files.ca}`,
    `--peer-cert-file=${files.cert}`,
    `--peer-key-file=${files.key}`,
    "--logger=zap",
    "--log-outputs=stderr",
    `--heartbeat-interval=${timing.heartbeatMs}`,
    `--election-timeout=${timing.electionMs}`,
    // A member that comes back (a rebooted node) asks before it campaigns,
    // instead of forcing an election on a cluster that has a leader.
    "--pre-vote=true",
    `--snapshot-count=${timing.snapshotCount}`,
    // History is compacted by etcd itself, whether or not an apiserver runs;
    // the quota makes etcd refuse writes (NOSPACE) before the disk is full.
    "--auto-compaction-mode=periodic",
    `--auto-compaction-retention=${AUTO_COMPACTION_RETENTION}`,
    ...(options.quotaBytes ? [`--quota-backend-bytes=${options.quotaBytes}`] : []),
    ...(options.forceNewCluster ? ["--force-new-cluster"] : []),
  ];
}

const ZAP_LEVELS: Record<string, ParsedLine["level"]> = { debug: "debug", info: "info", warn: "warn", error: "error", dpanic: "error", panic: "error", fatal: "error" };
/** Fields of etcd's zap lines that the logger already says another way. */
const ZAP_NOISE = new Set(["level", "ts", "msg", "caller"]);

/** etcd logs one JSON object per line (zap): keep its level, message and fields. */
export function parseEtcdLine(line: string): ParsedLine | undefined {
  if (!line.startsWith("{")) return undefined;
  try {
    const entry = JSON.parse(line) as Record<string, unknown>;
    const fields: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(entry)) if (!ZAP_NOISE.has(k)) fields[k] = v;
    return { level: ZAP_LEVELS[String(entry.level)] ?? "info", message: String(entry.msg ?? line), fields };
  } catch {
    return undefined;
  }
}

/** Data directories whose etcd died on a full partition and has not served since. */
const diedOnFullDisk = new Set<string>();

/**
 * Runs this node's etcd member until cancelled. Healthy once it answers a
 * read through its client URL. On a full data partition it does not start
 * etcd: it says so once and waits for space (no crash loop), and an etcd
 * that dies because the partition filled up is reported as that.
 *
 * A member that joins is caught up by a snapshot from the leader (etcd
 * 3.6's leader keeps no log entry 1 in memory, so an empty member always
 * gets one). Before the snapshot came, the member had already sent the
 * leader its publish (its name and client URL, through raft: it serves
 * clients only once that entry is applied), and the leader had usually
 * applied it into the very snapshot it sent. The member then waits for an
 * entry that never reaches it on its own, for etcd's whole request timeout
 * (5 s + two election timeouts: 10 s with the shared timing), and only
 * its second try goes through: etcd-io/etcd#3774; 6 of 8 joins on this
 * host, both joins of a 100-node launch. So a member that applied a
 * snapshot and has not published PUBLISH_AFTER_SNAPSHOT_GRACE_MS later is
 * killed and run again, once per call: it starts from the snapshot on its
 * disk, the leader sends it entries, and its publish is one of them (a
 * join took 1.2 s so on this host, against 10.1 s). etcd is safe to kill
 * at any point; its acknowledged state is on disk.
 */
export async function runEtcdMember(ctx: RunContext, options: EtcdMemberOptions, publishGraceMs = PUBLISH_AFTER_SNAPSHOT_GRACE_MS): Promise<void> {
  const dataRoot = dirname(options.dataDir);
  mkdirSync(dataRoot, { recursive: true, mode: 0o700 });
  const minFree = options.minFreeBytes ?? ETCD_MIN_FREE_BYTES;
  // After a death on a full partition, twice the room: a margin. It was
  // added while chasing repeated deaths that turned out to be the fault
  // suite's own fill (test/faults/process_mode.ts); with that fixed, a
  // dying etcd was seen to give back nothing (4 KiB free before and after),
  // so the margin rests on no measured need.
  const needs = diedOnFullDisk.has(dataRoot) ? 2 * minFree : minFree;
  const space = await waitForFreeSpace(dataRoot, needs, {
    signal: ctx.signal,
    onFull: (space) =>
      ctx.logger.error("data partition full: etcd waits for space before it starts", {
        space: describeSpace(space),
        needs: formatBytes(needs),
      }),
    onFreed: (space, waitedMs) => ctx.logger.info("data partition has room again: starting etcd", { space: describeSpace(space), waitedMs: Math.round(waitedMs) }),
  });
  mkdirSync(options.dataDir, { recursive: true, mode: 0o700 });
  const files = writeTlsFiles(options.tlsDir, options.tls);
  const args = etcdArgs({ ...options, quotaBytes: options.quotaBytes ?? memberQuota(options.dataDir) }, files);
  ctx.logger.info("starting etcd", {
    name: options.name,
    state: options.clusterState,
    members: options.initialCluster.length,
    expectedMembers: options.expectedMembers ?? options.initialCluster.length,
    electionTimeoutMs: raftTimingFor(options.expectedMembers ?? options.initialCluster.length).electionMs,
    space: describeSpace(space),
  });
  let client: Promise<Etcd3> | undefined;
  let notAMember: string | undefined;
  for (let run = 1; ; run++) {
    let pid: number | undefined;
    let published = false;
    /** Set once this run was killed for its overtaken publish: the next run follows. */
    let overtaken = false;
    let overtakenTimer: ReturnType<typeof setTimeout> | undefined;
    let servingClients!: () => void;
    const serving = new Promise<void>((resolve) => (servingClients = resolve));
    const killOvertaken = () => {
      if (published || pid === undefined || ctx.signal.aborted) return;
      try {
        process.kill(pid, "SIGKILL");
      } catch {
        return; // It has exited already: whatever it died of is reported as that.
      }
      overtaken = true;
      ctx.logger.info("etcd applied the leader's snapshot without publishing itself, its publish overtaken by the snapshot: running it again from the snapshot on disk", {
        graceMs: publishGraceMs,
      });
    };
    try {
      await runProcess(ctx, {
        command: options.binary ?? ETCD_BINARY,
        args,
        env: { ETCD_UNSUPPORTED_ARCH: process.arch === "x64" ? "" : process.arch },
        parseLine: (line) => {
          const parsed = parseEtcdLine(line);
          if (parsed?.message === SERVING_CLIENTS_MESSAGE) servingClients();
          if (parsed?.message === PUBLISHED_MESSAGE) published = true;
          // Once per call: a second snapshot overtaking a publish is left to etcd's own retry.
          if (parsed?.message === APPLIED_SNAPSHOT_MESSAGE && run === 1 && !published) overtakenTimer ??= setTimeout(killOvertaken, publishGraceMs);
          notAMember ??= NOT_A_MEMBER_MESSAGES.map((m) => m.exec(line)?.[0]).find((said) => said !== undefined);
          return parsed;
        },
        // An etcd left running by an earlier run of this node (killed before it
        // could stop it) would hold the ports and the data: kill it first.
        pidFile: join(dataRoot, "etcd.pid"),
        onSpawn: (spawned) => {
          pid = spawned;
          client = options.client?.();
          client?.catch(() => {});
        },
        ready: async (signal) => {
          // etcd logs that it serves clients once it has published itself
          // through raft; that line is the cue. The check after it is one read,
          // through the caller's own client when it gave one, so that the
          // client's connection is made once, here, and kept. Without the line
          // (another etcd version's wording), probing goes on at an interval.
          // Each later probe uses a fresh client: a client whose connection
          // failed waits out gRPC's reconnect backoff, a second and growing.
          const cue = await Promise.race([serving.then(() => "line" as const), sleep(SERVING_LINE_WAIT_MS, signal).then(() => "no line" as const)]);
          if (cue === "no line") ctx.logger.warn("etcd has not said it serves clients; probing it", { waitedMs: SERVING_LINE_WAIT_MS });
          let kept = cue === "line" ? await client : undefined;
          for (;;) {
            signal.throwIfAborted();
            const client = kept ?? (await connectEtcd({ endpoints: [clientUrl(options.clientHost, options.clientPort)], tls: options.tls }));
            try {
              await client.get("nodecore/ready-probe").exec();
              break;
            } catch {
              await sleep(READY_PROBE_INTERVAL_MS, signal);
            } finally {
              if (client !== kept) client.close();
              kept = undefined;
            }
          }
          ctx.logger.info("etcd is serving");
          diedOnFullDisk.delete(dataRoot);
          options.onReady?.();
        },
      });
      return;
    } catch (err) {
      if (overtaken && !ctx.signal.aborted) continue;
      if (ctx.signal.aborted) throw err;
      if (notAMember !== undefined) throw new EtcdNotAMemberError(`etcd stopped: the cluster has no member for this node (etcd: ${notAMember}): ${(err as Error).message}`, { cause: err });
      const space = freeSpace(dataRoot);
      if (space.freeBytes >= minFree) throw err;
      diedOnFullDisk.add(dataRoot);
      throw new Error(`etcd stopped and the data partition is full (${describeSpace(space)}): ${(err as Error).message}`, { cause: err });
    } finally {
      clearTimeout(overtakenTimer);
    }
  }
}
