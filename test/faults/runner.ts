// The fault runner, process mode: a three-node cluster of node processes
// (all consensus members), a workload of owner clients writing and reading
// node labels, and one fault per run, in an order and with timing fixed by
// the seed. After the runs, every etcd member's own copy is read and the
// history checked (checker.ts).
//
//   seed ──▶ PRNG ──▶ per run: fault kind, victim, delays
//   workload (CLIENTS owner clients, one CuratorPool each)
//        │ write  c<i>-k<j> = c<i>-<n>   (UpdateNodeLabels on node 1, fenced CAS)
//        │ read   every label of node 1   (GetNodes)
//        ▼
//   history ──▶ checkHistory(…, final values from each member's copy)
//
// Fault kinds (process mode): SIGKILL of a node's etcd (its node starts it
// again), SIGKILL of a whole node process (the curator's host; started
// again by the runner after a pause). Network partitions, netem and full
// disks need the qemu mode and its network namespace (not built yet).
//
// Per run it measures the time from the fault to the first acknowledged
// write after it, and to the cluster being healthy again (every node
// HEALTHY, every etcd member a voter), with a 60 s bound.

import { fromBinary } from "@bufbuild/protobuf";
import { Management, Node_Health } from "../../proto/gen/api/management_pb.ts";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { CuratorPool, NoCuratorError } from "../../internal/curator/client/mod.ts";
import { ETCD_PREFIX } from "../../internal/curator/mod.ts";
import { configPaths, loadCredentials } from "../../internal/operator/mod.ts";
import { RpcError, Status } from "../../internal/rpc/mod.ts";
import { eventually, tempDir } from "../../internal/testing/mod.ts";
import type { NodeProcess } from "../support/node_process.ts";
import { etcdClientOf, etcdMembersVia, formProcessCluster, type ProcessCluster } from "../support/process_cluster.ts";
import { checkHistory, type CheckResult } from "./checker.ts";
import { HistoryRecorder } from "./history.ts";

export const FAULT_KINDS = ["etcd-kill", "node-kill"] as const;
export type FaultKind = (typeof FAULT_KINDS)[number];

/** Owner clients writing and reading at once. */
export const CLIENTS = 3;
/** Keys each client writes (each a register). */
const KEYS_PER_CLIENT = 3;
const CALL_TIMEOUT_MS = 2_000;
/** How long the cluster has to be healthy again after a fault ends. */
export const RECOVERY_BOUND_MS = 60_000;

export interface RunRecord {
  kind: FaultKind;
  victim: string;
  /** Fault → the first acknowledged write invoked after it. */
  firstWriteMs: number | undefined;
  /** Fault ended → every node HEALTHY and every member a voter; undefined if not within the bound. */
  recoveryMs: number | undefined;
}

export interface FaultReport {
  seed: number;
  runs: RunRecord[];
  check: CheckResult;
  /** Node processes that exited without the runner killing them (PID 1 must never die). */
  unexpectedExits: string[];
  /** The recorded operations and the end state, for a closer look at a violation. */
  history: { ops: HistoryRecorder["ops"]; final: Record<string, (string | null)[]> };
}

/** mulberry32: a small seeded PRNG, so that a seed replays the same faults and timing. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Whether one curator's answer proves the call did not take effect there. */
function refusedBeforeEffect(err: unknown): boolean {
  if (!(err instanceof RpcError)) return false;
  if (err.code === Status.UNAVAILABLE) return /not the leader|write was not made/.test(err.details);
  return err.code === Status.INVALID_ARGUMENT || err.code === Status.NOT_FOUND || err.code === Status.FAILED_PRECONDITION || err.code === Status.PERMISSION_DENIED;
}

/**
 * failed: provably did not take effect (every curator tried either never
 * got the call, or refused it before writing); unknown: anything else, such
 * as a deadline or a connection lost mid-call.
 */
function classify(err: unknown): "failed" | "unknown" {
  if (refusedBeforeEffect(err)) return "failed";
  if (err instanceof NoCuratorError) {
    const neverSent = new Set(["refused", "unreachable", "timeout", "untrusted", "identity", "failed"]);
    return err.failures.every((f) => neverSent.has(f.kind) || refusedBeforeEffect(f.error)) ? "failed" : "unknown";
  }
  return "unknown";
}

/**
 * Each member's own copy of node `id`'s labels (serializable reads, no
 * quorum), once that member has applied everything the cluster had
 * committed when the reads began: a member that restarted in the last run
 * may still be catching up, and a copy read before then is merely late,
 * not lost.
 */
async function labelsAtEachMember(cluster: ProcessCluster, id: string): Promise<Map<string, string>[]> {
  const connections = cluster.nodes.map(etcdClientOf);
  const clients = connections.map((c) => c.namespace(ETCD_PREFIX));
  try {
    // A linearizable read: its revision is everything committed so far.
    const committed = BigInt((await clients[0]!.get(`nodes/${id}`).exec()).header.revision);
    const copies: Map<string, string>[] = [];
    for (const client of clients) {
      const response = await eventually(
        async () => {
          const read = await client.get(`nodes/${id}`).serializable(true).exec();
          if (BigInt(read.header.revision) < committed) throw new Error(`member at revision ${read.header.revision}, behind ${committed}`);
          return read;
        },
        { timeoutMs: RECOVERY_BOUND_MS, intervalMs: 200, what: "every member caught up" },
      );
      const value = response.kvs[0]?.value;
      const record = value ? fromBinary(NodeRecordSchema, value) : undefined;
      copies.push(new Map((record?.labels ?? []).map((l) => [l.key, l.value])));
    }
    return copies;
  } finally {
    for (const connection of connections) connection.close();
  }
}

export interface FaultOptions {
  seed: number;
  runs: number;
  kinds?: readonly FaultKind[];
  /** First loopback host number of the cluster (processes of other tests use others). */
  firstHost?: number;
  log?: (line: string) => void;
}

export async function runFaults(options: FaultOptions): Promise<FaultReport> {
  const log = options.log ?? (() => {});
  const random = seededRandom(options.seed);
  const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)]!;
  const between = (lo: number, hi: number) => Math.round(lo + random() * (hi - lo));
  const kinds = options.kinds ?? FAULT_KINDS;
  const dir = tempDir("nodecore-faults-");
  const cluster = await formProcessCluster(dir.path, options.firstHost ?? 240, (step) => log(`cluster: ${step}`));
  const owner = loadCredentials(configPaths(cluster.ctlDir), cluster.ownerKeyFile);
  const target = cluster.ids.get(cluster.nodes[0]!)!;
  const history = new HistoryRecorder();
  const killedByUs = new Set<NodeProcess>();
  const pools = Array.from({ length: CLIENTS }, () => new CuratorPool({ ca: owner.ca, certificate: owner.certificate, privateKey: owner.key.privateKey }));
  const acked: number[] = [];
  let stop = false;

  const client = async (i: number) => {
    const pool = pools[i]!;
    const keys = Array.from({ length: KEYS_PER_CLIENT }, (_, j) => `c${i}-k${j}`);
    for (let n = 0; !stop; n++) {
      const key = keys[n % keys.length]!;
      const value = `c${i}-${n}`;
      const invoked = performance.now();
      const result = await history.write(
        i,
        key,
        value,
        () => pool.call(Management, owner.endpoints, (m) => m.updateNodeLabels({ id: target, upsert: [{ key, value }] }, { timeoutMs: CALL_TIMEOUT_MS })).then(() => {}),
        classify,
      );
      if (result === "ok") acked.push(invoked);
      if (n % 2 === 1) {
        await history.read(
          i,
          keys,
          () =>
            pool.call(Management, owner.endpoints, async (m) => {
              for await (const node of m.getNodes({}, { timeoutMs: CALL_TIMEOUT_MS })) {
                if (node.id === target) return new Map(node.labels.map((l) => [l.key, l.value]));
              }
              throw new Error(`node ${target} is not listed`);
            }),
          classify,
        );
      }
      if (result !== "ok") await Bun.sleep(50);
    }
  };

  const healthy = async () => {
    const nodes = await pools[0]!.call(Management, owner.endpoints, async (m) => {
      const all = [];
      for await (const node of m.getNodes({}, { timeoutMs: CALL_TIMEOUT_MS })) all.push(node);
      return all;
    });
    if (!nodes.every((n) => n.health === Node_Health.HEALTHY)) throw new Error("not every node is HEALTHY");
    const members = await etcdMembersVia(cluster.nodes[0]!);
    if (members.length !== 3 || members.some((m) => m.isLearner)) throw new Error("not three voting members");
  };

  const runs: RunRecord[] = [];
  const faultTimes: number[] = [];
  const clients = Array.from({ length: CLIENTS }, (_, i) => client(i));
  try {
    await eventually(healthy, { timeoutMs: RECOVERY_BOUND_MS, intervalMs: 500, what: "a healthy cluster before the first fault" });
    for (let run = 0; run < options.runs; run++) {
      const kind = kinds[run % kinds.length]!;
      const victim = pick(cluster.nodes);
      await Bun.sleep(between(1_000, 3_000));
      const faultAt = performance.now();
      const logsFrom = victim.logs.length;
      switch (kind) {
        case "etcd-kill": {
          const pid = victim.etcdPid();
          if (pid === undefined) throw new Error(`no etcd pid known for ${victim.name}`);
          log(`run ${run + 1}: SIGKILL etcd of ${victim.name} (pid ${pid})`);
          process.kill(pid, "SIGKILL");
          break;
        }
        case "node-kill": {
          log(`run ${run + 1}: SIGKILL node process ${victim.name}`);
          killedByUs.add(victim);
          await victim.stop("SIGKILL");
          await Bun.sleep(between(2_000, 5_000));
          victim.start();
          killedByUs.delete(victim);
          break;
        }
        default: {
          const unreachable: never = kind;
          throw new Error(`unknown fault ${String(unreachable)}`);
        }
      }
      const faultEnded = performance.now();
      let recoveryMs: number | undefined;
      // Healthy again means the victim came back too: its etcd serving again
      // (and, after a node kill, the node UP), then every node HEALTHY and
      // every member a voter. A heartbeat from before the fault is not enough.
      const back = () => {
        const since = victim.logs.slice(logsFrom);
        if (!since.some((l) => l.msg === "etcd is serving")) throw new Error(`${victim.name}'s etcd is not serving again yet`);
        if (kind === "node-kill" && !since.some((l) => l.msg === "node is UP")) throw new Error(`${victim.name} is not UP again yet`);
      };
      try {
        await eventually(
          async () => {
            back();
            await healthy();
          },
          { timeoutMs: RECOVERY_BOUND_MS, intervalMs: 250, what: "the cluster healthy again" },
        );
        recoveryMs = performance.now() - faultEnded;
      } catch {
        recoveryMs = undefined;
      }
      faultTimes.push(faultAt);
      runs.push({ kind, victim: victim.name, firstWriteMs: undefined, recoveryMs });
      log(`run ${run + 1}: healthy again after ${recoveryMs === undefined ? "more than 60 s" : `${Math.round(recoveryMs)} ms`}`);
    }
  } finally {
    stop = true;
    await Promise.all(clients);
  }
  // Fault → the first acknowledged write invoked after it, over the whole
  // history (it may come after the cluster counted as healthy again).
  runs.forEach((record, i) => {
    const first = acked.filter((t) => t >= faultTimes[i]!).sort((a, b) => a - b)[0];
    if (first !== undefined) record.firstWriteMs = first - faultTimes[i]!;
  });
  try {
    const copies = await labelsAtEachMember(cluster, target);
    const keys = new Set(history.ops.map((o) => o.key));
    const final = new Map([...keys].map((key) => [key, copies.map((c) => c.get(key) ?? null)]));
    const unexpectedExits = cluster.nodes.filter((n) => !killedByUs.has(n) && n.exitCode !== undefined).map((n) => n.name);
    return { seed: options.seed, runs, check: checkHistory(history.ops, final), unexpectedExits, history: { ops: history.ops, final: Object.fromEntries(final) } };
  } finally {
    for (const pool of pools) pool.close();
    await cluster.stop();
    dir[Symbol.dispose]();
  }
}
