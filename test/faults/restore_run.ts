// The fault suite's restore kind (process mode): a backup is taken while
// owner clients write and read, they write on, and then every node goes
// down, the only consensus node for good. The owner restores the cluster
// from the backup onto a new machine at that node's address; the other
// nodes come back with their own disks.
//
//   form (node 1 consensus, nodes 2 and 3 plain members) ─ workload ─
//   ctl cluster backup (while writing) ─ more writes ─ every node killed,
//   node 1's disk gone ─▶ a damaged copy of the backup refused by ctl
//   params restore ─▶ ctl params restore ─▶ a new node 1 restores ─▶
//   nodes 2 and 3 start again ─▶ checks
//
// What the restored cluster must hold is the history up to the backup.
// Its snapshot was taken at some moment while the backup call ran, so the
// history is cut there: a write acknowledged before the call began must
// be in it (or overwritten by one that is), one acknowledged during it may
// or may not be, and nothing invoked after it ended can be. Reads are kept
// up to the call's start. The checker (checker.ts) then decides that
// history against the restored member's state.

import { fromBinary } from "@bufbuild/protobuf";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { ETCD_PREFIX } from "../../internal/curator/store.ts";
import { configPaths, loadCredentials } from "../../internal/operator/mod.ts";
import { tempDir } from "../../internal/testing/mod.ts";
import { NodeProcess } from "../support/node_process.ts";
import { etcdClientOf, etcdMembersVia, formProcessCluster } from "../support/process_cluster.ts";
import { checkHistory, type CheckResult } from "./checker.ts";
import type { Op } from "./history.ts";
import { chanceOf } from "./runner.ts";
import { Workload } from "./workload.ts";

export interface RestoreReport {
  seed: number;
  /** What ctl said to a damaged copy of the backup (and no parameters were written). */
  refusedDamaged: string;
  /** The backup's etcd revision. */
  backupRevision: number;
  /** Restore parameters in place → the restored node says the restore is done. */
  restoreMs: number;
  check: CheckResult;
  /** Writes acknowledged before the backup began: the ones that must be there. */
  ackedBeforeBackup: number;
  /** Nodes that came back with their own disks (same node ID, through the join path). */
  rejoined: string[];
  /** Nodes of the backup expected to come back. */
  expectedBack: string[];
  /** etcd's members after the restore (names) and the restored node's ID. */
  etcdMembers: string[];
  restoredId: string;
  unexpectedExits: string[];
}

/** The history a snapshot taken between `start` and `end` must agree with (see the top of this file). */
export function historyAtBackup(ops: readonly Op[], start: number, end: number): Op[] {
  const cut: Op[] = [];
  for (const op of ops) {
    if (op.kind === "read") {
      if (op.completedMs < start) cut.push(op);
      continue;
    }
    if (op.invokedMs > end) continue;
    if (op.completedMs < start || op.result === "failed") cut.push(op);
    else cut.push({ ...op, result: "unknown", completedMs: end });
  }
  return cut;
}

export async function runRestore(options: { seed: number; firstHost: number; log?: (line: string) => void }): Promise<RestoreReport> {
  const log = options.log ?? (() => {});
  const chance = chanceOf(options.seed);
  using dir = tempDir("nodecore-restore-run-");
  const cluster = await formProcessCluster(dir.path, options.firstHost, (step) => log(`cluster: ${step}`), { consensus: 1 });
  const [node1, node2, node3] = cluster.nodes as [NodeProcess, NodeProcess, NodeProcess];
  const restored = new NodeProcess("node1b", join(dir.path, "node1b"), node1.address);
  try {
    const credentials = loadCredentials(configPaths(cluster.ctlDir), cluster.ownerKeyFile);
    const owner = { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey, endpoints: credentials.endpoints };
    const target = cluster.ids.get(node2)!;
    const backup = join(dir.path, "cluster.backup");

    const workload = new Workload(owner, target);
    let backupStart = 0;
    let backupEnd = 0;
    try {
      await Bun.sleep(chance.between(2_000, 4_000));
      log("ctl cluster backup, while the clients write");
      backupStart = performance.now();
      await cluster.ctl("cluster", "backup", backup);
      backupEnd = performance.now();
      await Bun.sleep(chance.between(1_000, 3_000));
    } finally {
      await workload.stop();
    }
    const ops = workload.opsOf(0);
    const backupRevision = Number(/etcd revision: (\d+)/.exec((await cluster.ctl("cluster", "check-backup", backup)).stdout)?.[1] ?? 0);

    log("every node goes down; node 1's disk is lost for good");
    for (const node of cluster.nodes) await node.stop("SIGKILL");
    rmSync(node1.root, { recursive: true, force: true });

    const damaged = join(dir.path, "damaged.backup");
    const bytes = Buffer.from(readFileSync(backup));
    bytes[Math.floor(bytes.length / 2)]! ^= 0x40;
    writeFileSync(damaged, bytes);
    const refusedDamaged = await cluster.ctl("params", "restore", damaged, join(dir.path, "never.pb")).then(
      () => "",
      (err: Error) => err.message,
    );
    log(`a damaged copy: ${refusedDamaged || "NOT refused"}`);

    const paramsFile = join(dir.path, "restore.pb");
    await cluster.ctl("params", "restore", backup, paramsFile);
    restored.writeParameters(fromBinary(NodeParametersSchema, readFileSync(paramsFile)));
    const began = performance.now();
    restored.start();
    await restored.waitForLog((l) => l.msg === "cluster restored from the backup: this node is its only consensus member", { timeoutMs: 120_000, what: "the restore done" });
    const restoreMs = performance.now() - began;
    log(`restored in ${Math.round(restoreMs)} ms`);
    await cluster.ctl("takeownership", restored.address);

    const back: string[] = [];
    for (const node of [node2, node3]) {
      const from = node.logs.length;
      node.start();
      const line = await node.waitForLog((l) => l.msg === "this node is part of the cluster", { from, timeoutMs: 120_000, what: "back in the cluster" });
      if (line.node === cluster.ids.get(node) && line.via === "join") back.push(String(line.node));
      await node.waitForLog((l) => l.msg === "node is UP", { from, timeoutMs: 120_000, what: "UP again" });
    }
    log(`back with their own disks: ${back.join(", ")}`);

    const etcd = await etcdClientOf(restored);
    let copy: Map<string, string>;
    try {
      const bytes = await etcd.namespace(ETCD_PREFIX).get(`nodes/${target}`).buffer();
      const record = bytes ? fromBinary(NodeRecordSchema, bytes) : undefined;
      copy = new Map((record?.labels ?? []).map((l) => [l.key, l.value]));
    } finally {
      etcd.close();
    }
    const cut = historyAtBackup(ops, backupStart, backupEnd);
    const keys = new Set(ops.map((o) => o.key));
    const check = checkHistory(cut, new Map([...keys].map((key) => [key, [copy.get(key) ?? null]])));
    const members = (await etcdMembersVia(restored)).map((m) => m.name);
    return {
      seed: options.seed,
      refusedDamaged,
      backupRevision,
      restoreMs: Math.round(restoreMs),
      check,
      ackedBeforeBackup: ops.filter((o) => o.kind === "write" && o.result === "ok" && o.completedMs < backupStart).length,
      rejoined: back,
      expectedBack: [node2, node3].map((n) => cluster.ids.get(n)!),
      etcdMembers: members,
      restoredId: String(restored.logs.find((l) => l.msg === "this node is part of the cluster")?.node ?? ""),
      unexpectedExits: [restored, node2, node3].filter((n) => n.exitCode !== undefined).map((n) => n.name),
    };
  } finally {
    await restored.stop();
    await cluster.stop();
  }
}
