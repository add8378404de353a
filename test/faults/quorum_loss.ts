// The fault suite's quorum-loss kind (process mode): two of the three
// consensus nodes are lost for good while owner clients write and read,
// and the owner recovers from the survivor with `ctl cluster recover`.
//
//   form three nodes ─ workload ─ seeded pause ─▶ SIGKILL both nodes that
//   are not etcd's raft leader, delete their data (lost for good)
//   ─▶ ctl cluster recover --from <leader> (refused before the loss: the
//   quorum answered) ─▶ writes acknowledged again ─▶ checks
//
// The survivor is the raft leader: it has every entry the cluster
// committed, so every acknowledged write is at or below its revision and
// none may be missing. (From a follower, writes it had not received are
// lost, and the command says so; that is the price of the recovery, not a
// fault.) The checks: the history over the survivor's copy (nothing
// acknowledged lost, every key linearizable), etcd lists only the survivor,
// and no other node keeps the consensus role in the records.

import { fromBinary } from "@bufbuild/protobuf";
import { rmSync } from "node:fs";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { ETCD_PREFIX } from "../../internal/curator/store.ts";
import { configPaths, loadCredentials } from "../../internal/operator/mod.ts";
import { eventually, tempDir } from "../../internal/testing/mod.ts";
import type { NodeProcess } from "../support/node_process.ts";
import { etcdClientOf, etcdMembersVia, formProcessCluster } from "../support/process_cluster.ts";
import { checkHistory, type CheckResult } from "./checker.ts";
import { chanceOf } from "./runner.ts";
import { Workload } from "./workload.ts";

export interface QuorumLossReport {
  seed: number;
  survivor: string;
  lost: string[];
  /** What ctl said when asked to recover while the quorum was still there. */
  refusedWithQuorum: string;
  /** What ctl said on stderr while it recovered: the plan first, then each step. */
  ctlSaid: string[];
  /** ctl's request → the cluster takes writes again (ctl's own measure, in its JSON). */
  recoverMs: number;
  /** The loss → the first acknowledged write invoked after it. */
  firstWriteMs: number | undefined;
  check: CheckResult;
  /** etcd's members after the recovery (names). */
  etcdMembers: string[];
  /** Nodes whose records still hold the consensus role. */
  consensusRecords: string[];
  unexpectedExits: string[];
}

export async function runQuorumLoss(options: { seed: number; firstHost: number; log?: (line: string) => void }): Promise<QuorumLossReport> {
  const log = options.log ?? (() => {});
  const chance = chanceOf(options.seed);
  using dir = tempDir("nodecore-quorum-loss-");
  const cluster = await formProcessCluster(dir.path, options.firstHost, (step) => log(`cluster: ${step}`));
  const lostNodes = new Set<NodeProcess>();
  try {
    const credentials = loadCredentials(configPaths(cluster.ctlDir), cluster.ownerKeyFile);
    const owner = { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey, endpoints: credentials.endpoints };
    const target = cluster.ids.get(cluster.nodes[0]!)!;
    const ctl = (...args: string[]) => cluster.ctl(...args);

    // etcd's raft leader, as the members say (ctl etcd status).
    const leaderNode = async (): Promise<NodeProcess> => {
      const rows = JSON.parse((await ctl("etcd", "status", "--json")).stdout) as { node: string; role: string }[];
      const id = rows.find((r) => r.role === "leader")?.node;
      const node = cluster.nodes.find((n) => cluster.ids.get(n) === id);
      if (!node) throw new Error(`no etcd leader among ${JSON.stringify(rows)}`);
      return node;
    };

    const workload = new Workload(owner, target);
    let lossAt = 0;
    let refusedWithQuorum = "";
    let recoverMs = 0;
    let ctlSaid: string[] = [];
    let survivor!: NodeProcess;
    try {
      await Bun.sleep(chance.between(2_000, 5_000));
      survivor = await leaderNode();
      const survivorId = cluster.ids.get(survivor)!;
      // While the quorum answers, the command refuses (and changes nothing).
      const refused = await cluster.ctl("cluster", "recover", "--from", survivorId, "--yes").then(
        () => "",
        (err: Error) => err.message,
      );
      refusedWithQuorum = refused;
      log(`recover with the quorum there: ${refused || "NOT refused"}`);

      lossAt = performance.now();
      for (const node of cluster.nodes) {
        if (node === survivor) continue;
        lostNodes.add(node);
        log(`SIGKILL ${node.name} and delete its data: lost for good`);
        await node.stop("SIGKILL");
        rmSync(node.layout.data.path, { recursive: true, force: true });
      }
      await Bun.sleep(chance.between(1_000, 4_000));
      log(`ctl cluster recover --from ${survivorId} --yes`);
      const recovered = await ctl("cluster", "recover", "--from", survivorId, "--yes", "--json");
      ctlSaid = recovered.stderr.trim().split("\n").filter(Boolean);
      for (const line of ctlSaid) log(`  ${line}`);
      recoverMs = (JSON.parse(recovered.stdout) as { writableAfterMs: number }).writableAfterMs;
      const recoveredAt = performance.now();
      await eventually(
        () => {
          if (!workload.acked.some((t) => t >= recoveredAt)) throw new Error("no write acknowledged since the recovery");
        },
        { timeoutMs: 60_000, intervalMs: 100, what: "a write acknowledged after the recovery" },
      );
      await Bun.sleep(1_000);
    } finally {
      await workload.stop();
    }
    const ops = workload.opsOf(0);

    // The survivor's own copy of the target's labels.
    const etcd = await etcdClientOf(survivor);
    let copy: Map<string, string>;
    let consensusRecords: string[];
    try {
      const records = (await etcd.namespace(ETCD_PREFIX).getAll().prefix("nodes/").buffers()) as Record<string, Buffer>;
      const nodes = Object.values(records).map((bytes) => fromBinary(NodeRecordSchema, bytes));
      consensusRecords = nodes.filter((n) => n.roles?.consensusMember).map((n) => n.id);
      const record = nodes.find((n) => n.id === target);
      copy = new Map((record?.labels ?? []).map((l) => [l.key, l.value]));
    } finally {
      etcd.close();
    }
    const keys = new Set(ops.map((o) => o.key));
    const check = checkHistory(ops, new Map([...keys].map((key) => [key, [copy.get(key) ?? null]])));
    const first = workload.acked.filter((t) => t >= lossAt).sort((a, b) => a - b)[0];
    return {
      seed: options.seed,
      survivor: cluster.ids.get(survivor)!,
      lost: [...lostNodes].map((n) => cluster.ids.get(n)!),
      refusedWithQuorum,
      ctlSaid,
      recoverMs: Math.round(recoverMs),
      firstWriteMs: first === undefined ? undefined : Math.round(first - lossAt),
      check,
      etcdMembers: (await etcdMembersVia(survivor)).map((m) => m.name),
      consensusRecords,
      unexpectedExits: cluster.nodes.filter((n) => !lostNodes.has(n) && n.exitCode !== undefined).map((n) => n.name),
    };
  } finally {
    await cluster.stop();
  }
}
