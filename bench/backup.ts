// Disaster-recovery figures (issue 30), printed, never asserted. On one node
// process with a real etcd, for etcd databases filled to each size given:
//  - ctl cluster backup: the file's size, and the time to write it;
//  - the proof a scheduled backup gets: the snapshot restored into a
//    throwaway member and read (internal/backup/restore.ts);
//  - restore: ctl params restore, then a new node process booted with them
//    → it says the cluster is restored → its curator takes a write.
// And once each, from the fault suite's disasters (test/faults): recover
// (ctl's request → writable) and restore under a workload.
//   bun bench/backup.ts [MiB,MiB,...=8,64]

import { fromBinary } from "@bufbuild/protobuf";
import { readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema } from "../proto/gen/api/configuration_pb.ts";
import { decryptBackup, readSnapshot } from "../internal/backup/mod.ts";
import { curatorSnapshotState } from "../internal/curator/mod.ts";
import { readOwnerKey } from "../internal/operator/mod.ts";
import { rawPrivateKey } from "../internal/pki/mod.ts";
import { systemTree, tempDir, treeEtcd } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "../test/support/node_process.ts";
import { etcdClientOf } from "../test/support/process_cluster.ts";
import { runQuorumLoss } from "../test/faults/quorum_loss.ts";
import { runRestore } from "../test/faults/restore_run.ts";
import { figure, seconds } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const SIZES_MIB = benchArgs({}, { name: "MiB,MiB,...", default: "8,64", help: "database sizes to back up, in MiB" })
  .positional.split(",")
  .map((size) => wholeNumber("each size", size));
const WIDTH = 66;
const VALUE_BYTES = 64 * 1024;

const mib = (bytes: number) => `${(bytes / 2 ** 20).toFixed(1)} MiB`;

async function atSize(targetMiB: number, hostBase: number): Promise<void> {
  using dir = tempDir("nodecore-bench-backup-");
  const address = loopbackBlock();
  const node = new NodeProcess("node1", join(dir.path, "node1"), address(hostBase));
  const { ctl, bootstrap } = ownedNode(node, dir.path);
  const restored = new NodeProcess("node1b", join(dir.path, "node1b"), address(hostBase));
  try {
    await bootstrap();
    // Fill etcd with values under a prefix of the bench's own (the curator ignores it).
    const etcd = await etcdClientOf(node);
    let dbBytes = 0;
    try {
      const value = Buffer.alloc(VALUE_BYTES, 7);
      for (let i = 0; dbBytes < targetMiB * 2 ** 20; i++) {
        await etcd.put(`/bench/fill/${i}`).value(value);
        if (i % 64 === 0) dbBytes = Number((await etcd.maintenance.status()).dbSize);
      }
      dbBytes = Number((await etcd.maintenance.status()).dbSize);
    } finally {
      etcd.close();
    }
    const file = join(dir.path, "cluster.backup");
    let started = performance.now();
    const taken = await ctl("cluster", "backup", file, "--timeout", "600000");
    if (taken.code !== 0) throw new Error(`ctl cluster backup: ${taken.stderr.trim()}`);
    const backupMs = performance.now() - started;
    const fileBytes = statSync(file).size;

    const owner = readOwnerKey(join(dir.path, "owner.key"));
    const { snapshot } = decryptBackup(readFileSync(file), rawPrivateKey(owner.privateKey));
    started = performance.now();
    await readSnapshot({ etcd: treeEtcd(), etcdutl: join(systemTree(), "usr", "bin", "etcdutl"), snapshot, scratch: join(dir.path, "proof"), read: curatorSnapshotState });
    const proofMs = performance.now() - started;

    await node.stop("SIGKILL");
    const paramsFile = join(dir.path, "restore.pb");
    const params = await ctl("params", "restore", file, paramsFile);
    if (params.code !== 0) throw new Error(`ctl params restore: ${params.stderr.trim()}`);
    restored.writeParameters(fromBinary(NodeParametersSchema, readFileSync(paramsFile)));
    started = performance.now();
    restored.start();
    await restored.waitForLog((l) => l.msg === "cluster restored from the backup: this node is its only consensus member", { timeoutMs: 600_000, what: "restored" });
    const restoredMs = performance.now() - started;
    if ((await ctl("takeownership", restored.address)).code !== 0) throw new Error("takeownership after the restore failed");
    const id = JSON.parse((await ctl("node", "list", "--json")).stdout).find((n: { address: string; roles: string[] }) => n.roles.includes("consensus")).id as string;
    for (;;) {
      if ((await ctl("node", "label", id, "bench=restored")).code === 0) break;
      await Bun.sleep(200);
    }
    const writableMs = performance.now() - started;

    console.log(`\netcd database ${mib(dbBytes)} (filled to ${targetMiB} MiB with ${VALUE_BYTES / 1024} KiB values)`);
    figure("  ctl cluster backup: file size", mib(fileBytes), WIDTH);
    figure("  ctl cluster backup: time to write it", seconds(backupMs), WIDTH);
    figure("  proof: snapshot restored into a throwaway member and read", seconds(proofMs), WIDTH);
    figure("  restore: node booted with the parameters → restored", seconds(restoredMs), WIDTH);
    figure("  restore: node booted with the parameters → a write taken", seconds(writableMs), WIDTH);
  } finally {
    await restored.stop();
    await node.stop();
  }
}

console.log(
  `disaster-recovery figures, ${new Date().toISOString()}, on ${(await Bun.file("/proc/cpuinfo").text()).match(/model name\s*:\s*(.*)/)?.[1] ?? "this machine"} (${navigator.hardwareConcurrency} cores), node processes`,
);
for (const [i, size] of SIZES_MIB.entries()) await atSize(size, 120 + i * 2);
console.log("\nfrom the fault suite's disasters (a workload of three owner clients writing and reading):");
const loss = await runQuorumLoss({ seed: 1, firstHost: 70 });
figure("  recover: ctl's request → writable (two of three members lost)", seconds(loss.recoverMs), WIDTH);
figure("  recover: writes acknowledged / lost", `${loss.check.acknowledged} / ${loss.check.lost}`, WIDTH);
const restore = await runRestore({ seed: 1, firstHost: 90 });
figure("  restore: parameters in place → restored (under a workload)", seconds(restore.restoreMs), WIDTH);
figure("  restore: writes acknowledged before the backup / lost", `${restore.ackedBeforeBackup} / ${restore.check.lost}`, WIDTH);
