// A cluster restored from its backup under qemu, the way an owner does it
// after losing every consensus node (README, "Recovery"):
//
//   the time steps' two-node cluster (two_nodes.ts), or, run alone:
//   node1 bootstraps (the only consensus node) ─ node2 registers, approved
//   ─ a label ─ ctl cluster backup ─ a label the backup does not hold
//   ─ node1 lost for good (unplugged, its disk thrown away), node2 powered off
//   ─ ctl params restore: the plan names node2 and node1's address
//   ─ a new machine at node1's address (a fresh disk) boots with them: it
//     restores, its ESP holds no byte of the snapshot, the owner takes
//     ownership again, the backup's label is there and the later one is not
//   ─ node2 powers on with its own disk: the cluster half the backup kept
//     opens its LUKS2 partition, and it is UP in the restored cluster
//
// The process test (test/restore_process.test.ts) runs the same story with
// a stand-in for LUKS; here the disks, the firmware's parameters and
// cryptsetup are real.

import { fromBinary } from "@bufbuild/protobuf";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { ESP_PARTITION_NUMBER } from "../../image/layout.ts";
import { cloneDisk, manifestPaths, readManifest } from "../../image/mod.ts";
import { CONSOLE, createCluster, formCluster, type Cluster, type FormedCluster } from "../launch/mod.ts";
import { partitionContains, partitionExtent } from "./disk_inspection.ts";
import { eventually } from "../../internal/testing/mod.ts";
import { assert, assertEqual, e2eCleanup, e2eTest } from "./harness.ts";
import { takeOver } from "./two_nodes.ts";

const STEP_TIMEOUT_MS = 600_000;
const POLL_MS = 3_000;

let cluster: Cluster | undefined;
let formed: FormedCluster | undefined;
const ids: Record<string, string> = {};
let backupFile = "";
let snapshot: Uint8Array | undefined;

function need<T>(value: T | undefined, what: string): T {
  assert(value !== undefined, `${what} is not there: an earlier step failed`);
  return value;
}

async function nodeList(f: FormedCluster): Promise<{ id: string; state: string; roles: string[]; address: string; labels: string[] }[]> {
  const result = await f.ctl("node", "list", "--json");
  assertEqual(result.exitCode, 0, `ctl node list (${result.stderr.trim()})`);
  return JSON.parse(result.stdout);
}

/** The snapshot's 4 KiB pages richest in distinct bytes (keys live there): none may be found on an ESP. */
function telltalePages(bytes: Uint8Array, count: number): Buffer[] {
  const pages: { page: Buffer; distinct: number }[] = [];
  for (let at = 0; at + 4096 <= bytes.length; at += 4096) {
    const page = Buffer.from(bytes.subarray(at, at + 4096));
    pages.push({ page, distinct: new Set(page).size });
  }
  return pages
    .sort((a, b) => b.distinct - a.distinct)
    .slice(0, count)
    .map((p) => p.page);
}

e2eTest("two nodes (node1 the only consensus node) are backed up, and the cluster moves on past the backup", async (ctx) => {
  // The time steps' cluster when they ran before (two_nodes.ts): the same
  // shape, its clocks now right; otherwise one of this file's own.
  const handed = takeOver();
  if (handed) {
    ({ cluster, formed } = handed);
    cluster.node("node2").clockOffsetS = 0;
    ctx.logger.info("the time steps' two-node cluster, taken over");
  } else {
    cluster = await createCluster({ name: "e2e-restore", nodes: 2, subnetIndex: 9, quiet: !ctx.verbose, imageDir: ctx.imageDir, logger: ctx.logger.child("launch") });
    const started = performance.now();
    formed = await formCluster(cluster, { consensusNodes: 1, kubernetesController: false, timeoutMs: STEP_TIMEOUT_MS, logger: ctx.logger.child("formation") });
    ctx.report(`two-node cluster formed in qemu: ${((performance.now() - started) / 1000).toFixed(1)} s`);
  }
  const f = formed;
  ids.node1 = f.ids.get("node1")!;
  ids.node2 = f.ids.get("node2")!;
  const labelled = await f.ctl("node", "label", ids.node2, "e2e-before-backup=kept");
  assertEqual(labelled.exitCode, 0, `a label before the backup (${labelled.stderr.trim()})`);
  backupFile = join(cluster.dir.path, "cluster.backup");
  const taken = await f.ctl("cluster", "backup", backupFile);
  assertEqual(taken.exitCode, 0, `ctl cluster backup (${taken.stderr.trim()})`);
  const checked = await f.ctl("cluster", "check-backup", backupFile);
  assertEqual(checked.exitCode, 0, `ctl cluster check-backup (${checked.stderr.trim()})`);
  assert(checked.stdout.includes("readable with this owner key, etcd's checksum matches"), `the backup reads:\n${checked.stdout}`);
  const after = await f.ctl("node", "label", ids.node2, "e2e-after-backup=lost");
  assertEqual(after.exitCode, 0, `a label after the backup (${after.stderr.trim()})`);
});

e2eTest("every node lost: node1 unplugged with its disk thrown away, node2 powered off; ctl params restore names what comes back and where to boot", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const node1 = c.node("node1");
  await node1.stop({ clean: false });
  rmSync(node1.files.disk, { force: true });
  rmSync(node1.files.parameters, { force: true });
  await c.node("node2").stop({ clean: true });
  ctx.logger.info("node1 unplugged and its disk thrown away; node2 powered off");

  // The operator's new machine takes node1's place: node1's address, a freshly installed disk.
  const image = manifestPaths(readManifest(ctx.imageDir), ctx.imageDir);
  await cloneDisk(image.disk, node1.files.disk);
  const written = await f.ctl("params", "restore", backupFile, node1.files.parameters);
  assertEqual(written.exitCode, 0, `ctl params restore (${written.stderr.trim()})`);
  assert(written.stderr.includes("ctl: nodes that can join it again with their own disks: "), `the plan lists who comes back:\n${written.stderr}`);
  for (const id of [ids.node1!, ids.node2!]) assert(written.stderr.includes(id), `the plan names ${id}:\n${written.stderr}`);
  assert(written.stderr.includes(`at an address its consensus nodes had (${node1.address})`), `the plan names node1's address:\n${written.stderr}`);
  const params = fromBinary(NodeParametersSchema, readFileSync(node1.files.parameters));
  assertEqual(params.cluster.case, "clusterRestore", "the parameters' kind");
  snapshot = params.cluster.case === "clusterRestore" ? params.cluster.value.snapshot : undefined;
  ctx.report(`restore parameters: ${(readFileSync(node1.files.parameters).length / 1024 / 1024).toFixed(1)} MiB (the snapshot, decrypted)`);
});

e2eTest("the new machine at node1's address restores the cluster from the backup's snapshot; its ESP holds none of it; the owner takes ownership again", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const node1 = c.node("node1");
  const booted = performance.now();
  await node1.start();
  await node1.waitForConsole(/cluster restored from the backup: this node is its only consensus member/, STEP_TIMEOUT_MS);
  await node1.waitForConsole(CONSOLE.nodeUp, STEP_TIMEOUT_MS);
  ctx.report(`restore parameters → the restored node UP (TCG): ${((performance.now() - booted) / 1000).toFixed(1)} s`);
  // The operator takes the parameters back from the hypervisor: they hold every key of the cluster.
  rmSync(node1.files.parameters, { force: true });

  // A node of its own (its keys are new), under the backup's CA: the owner asks it again.
  await eventually(
    async () => {
      const taken = await f.ctl("takeownership", node1.address);
      assertEqual(taken.exitCode, 0, `ctl takeownership (${taken.stderr.trim()})`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "ownership of the restored cluster" },
  );
  const list = await nodeList(f);
  const self = list.find((n) => n.address === node1.address && n.id !== ids.node1);
  assert(self !== undefined, `the restored node is listed: ${JSON.stringify(list)}`);
  ids.restored = self.id;
  assertEqual(self.roles.join(","), "consensus", "the restored node's roles");
  assert(!(list.find((n) => n.id === ids.node1)?.roles ?? []).includes("consensus"), "the lost node1 no longer holds the consensus role");
  const labels = list.find((n) => n.id === ids.node2)?.labels ?? [];
  assert(labels.includes("e2e-before-backup=kept") && !labels.includes("e2e-after-backup=lost"), `node2's labels are the backup's, not the later one: ${labels.join(",")}`);

  // On the host, with the VM running: the snapshot came in through the firmware and went to the encrypted data partition only.
  const esp = await partitionExtent(node1.files.disk, ESP_PARTITION_NUMBER);
  const pages = telltalePages(need(snapshot, "the snapshot"), 3);
  assert(pages.length === 3, "the snapshot has pages to look for");
  for (const page of pages) assert(!partitionContains(node1.files.disk, esp, page), "a page of the snapshot is on the restored node's ESP, in clear text");
});

e2eTest("node2 powers on with its own disk: the cluster half the backup kept opens its LUKS2 partition, and it is UP in the restored cluster", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const node2 = c.node("node2");
  const from = node2.console.lines.length;
  const booted = performance.now();
  await node2.start();
  const unlocked = await node2.waitForConsole(/got the cluster unlock key curator=(\S+)/, STEP_TIMEOUT_MS);
  // Its sealed directory names the lost node1 there: it asks that address, and the restored node answers.
  assert(unlocked.text.includes(`curator=${c.node("node1").address}:`), `node2 got its cluster half at node1's address: ${unlocked.text}`);
  await node2.waitForConsole(CONSOLE.nodeUp, STEP_TIMEOUT_MS);
  assert(
    node2.console.lines.slice(from).every((l) => !/cold start/.test(l.text)),
    "node2 did not fall back to a cold start",
  );
  await eventually(
    async () => {
      const listed = (await nodeList(f)).find((n) => n.id === ids.node2);
      assertEqual(listed?.state, "UP", "node2's state in the restored cluster");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2 UP in the restored cluster" },
  );
  const write = await f.ctl("node", "label", ids.node2!, "e2e-after-restore=written");
  assertEqual(write.exitCode, 0, `a write in the restored cluster (${write.stderr.trim()})`);
  ctx.report(`node2 power-on → its own disk opened, UP in the restored cluster (TCG): ${((performance.now() - booted) / 1000).toFixed(1)} s`);
});

e2eCleanup(async () => {
  await cluster?.close();
});
