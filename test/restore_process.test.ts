// Restoring a cluster from a backup, as node processes on loopback, as an
// owner would after losing every consensus node: node 1 (the only
// consensus member) bootstraps, node 2 registers as a plain member; the
// owner backs up, writes more, loses node 1 for good, and turns the backup
// into restore parameters for a new machine at node 1's address. Node 2,
// stopped meanwhile with its disk, comes back and opens that disk with the
// cluster half the backup kept for it.

import { afterAll, describe, expect, test } from "bun:test";
import { existsSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { create, fromBinary } from "@bufbuild/protobuf";
import { NodeParametersSchema } from "../proto/gen/api/configuration_pb.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../internal/pki/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, ctl as runCtl, loopbackBlock } from "./support/node_process.ts";
import { etcdMembersVia } from "./support/process_cluster.ts";

const dir = tempDir("nodecore-restore-");
const address = loopbackBlock();
const node1 = new NodeProcess("node1", join(dir.path, "node1"), address(81));
const node2 = new NodeProcess("node2", join(dir.path, "node2"), address(82));
/** The new machine, at node 1's address. */
const restored = new NodeProcess("node1b", join(dir.path, "node1b"), address(81));
const owner = generateKeyPair();
const ownerKeyFile = join(dir.path, "owner.key");
writeFileSync(ownerKeyFile, privateKeyPem(owner.privateKey));
const ctl = (...args: string[]) => runCtl(join(dir.path, "ctl"), "--owner-key", ownerKeyFile, ...args);
const backup = join(dir.path, "cluster.backup");
const ids: Record<string, string> = {};

afterAll(async () => {
  await Promise.all([node1, node2, restored].map((n) => n.stop()));
  dir[Symbol.dispose]();
}, 60_000);

async function nodeList(): Promise<{ id: string; state: string; roles: string[]; address: string; labels: string[] }[]> {
  const result = await ctl("node", "list", "--json");
  if (result.code !== 0) throw new Error(`ctl node list failed: ${result.stderr}`);
  return JSON.parse(result.stdout);
}

describe("a cluster restored from its backup", () => {
  test("node 1 bootstraps, node 2 registers and is approved, a label is set and the owner backs up", async () => {
    node1.writeParameters(create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(owner.publicKey) } } }));
    node1.start();
    await node1.waitForLog((l) => l.msg === "node is UP", { what: "node 1 UP" });
    expect((await ctl("takeownership", node1.address)).code).toBe(0);
    const paramsFile = join(dir.path, "register.pb");
    expect((await ctl("params", "register", paramsFile)).code).toBe(0);
    node2.writeParameters(fromBinary(NodeParametersSchema, readFileSync(paramsFile)));
    node2.start();
    const waiting = await node2.waitForLog((l) => l.msg.startsWith("waiting for the owner to approve node"), { what: "waiting for approval" });
    ids.node2 = String(waiting.msg).split(" ")[7]!;
    expect((await ctl("node", "approve", ids.node2)).code).toBe(0);
    await node2.waitForLog((l) => l.msg === "node is UP", { what: "node 2 UP" });
    ids.node1 = (await nodeList()).find((n) => n.address === node1.address)!.id;
    expect((await ctl("node", "label", ids.node2, "before=backup")).code).toBe(0);
    const taken = await ctl("cluster", "backup", backup);
    expect(taken.stderr).toBe("");
    expect(taken.code).toBe(0);
  }, 120_000);

  test("after a write the backup does not hold, node 1 is lost for good and node 2 stops", async () => {
    expect((await ctl("node", "label", ids.node2!, "after=backup")).code).toBe(0);
    await node1.stop("SIGKILL");
    rmSync(node1.root, { recursive: true, force: true });
    await node2.stop();
  }, 60_000);

  test("ctl params restore says what comes back and where to boot, and refuses a damaged backup with why", async () => {
    const damaged = join(dir.path, "damaged.backup");
    const bytes = Buffer.from(readFileSync(backup));
    bytes[bytes.length - 200]! ^= 1;
    writeFileSync(damaged, bytes);
    // ctl cluster restore is the same action, where Talos and Metropolis operators look for it.
    const refused = await ctl("cluster", "restore", damaged, join(dir.path, "never.pb"));
    expect(refused.code).toBe(1);
    expect(refused.stderr).toStartWith(`ctl: ${damaged}: frame `);
    expect(existsSync(join(dir.path, "never.pb"))).toBe(false);

    const paramsFile = join(dir.path, "restore.pb");
    const written = await ctl("params", "restore", backup, paramsFile);
    expect(written.code).toBe(0);
    expect(written.stdout.trim()).toBe(`restore parameters written to ${paramsFile}`);
    expect(written.stderr).toContain(`ctl: nodes that can join it again with their own disks: `);
    for (const id of [ids.node1!, ids.node2!]) expect(written.stderr).toContain(id);
    expect(written.stderr).toContain(`ctl: boot the restoring node at an address its consensus nodes had (${node1.address})`);
    const params = fromBinary(NodeParametersSchema, readFileSync(paramsFile));
    expect(params.cluster.case).toBe("clusterRestore");
    restored.writeParameters(params);
  });

  test("the new machine at node 1's address restores the cluster, deletes the parameters, and the owner takes ownership again", async () => {
    restored.start();
    await restored.waitForLog((l) => l.msg === "node is UP", { timeoutMs: 120_000, what: "the restored node UP" });
    await restored.waitForLog((l) => l.msg === "cluster restored from the backup: this node is its only consensus member", { what: "restore finished" });
    expect(existsSync(restored.layout.esp.parameters)).toBe(false);
    // A node of its own (its keys are new), under the backup's CA: the owner's endpoints name node 1, so ctl asks again.
    expect((await ctl("takeownership", restored.address)).code).toBe(0);
    const list = await nodeList();
    const self = list.find((n) => n.address === restored.address && n.id !== ids.node1)!;
    ids.restored = self.id;
    expect(self.roles).toEqual(["consensus"]);
    expect(list.find((n) => n.id === ids.node1)?.roles ?? []).not.toContain("consensus");
    expect((await etcdMembersVia(restored)).map((m) => m.name)).toEqual([ids.restored]);
    // The backup's state: the label set before it, not the one after.
    const labels = list.find((n) => n.id === ids.node2)!.labels;
    expect(labels).toEqual(["before=backup"]);
  }, 150_000);

  test("node 2 comes back with its own disk and joins the restored cluster", async () => {
    const from = node2.logs.length;
    node2.start();
    await node2.waitForLog((l) => l.msg === "node is UP", { from, timeoutMs: 120_000, what: "node 2 UP again" });
    await eventually(async () => expect((await nodeList()).find((n) => n.id === ids.node2)?.state).toBe("UP"), { timeoutMs: 30_000 });
    // Its data survived: it opened the partition it had (a plain directory here), with the same node identity.
    expect(node2.logs.slice(from).some((l) => l.msg === "this node is part of the cluster" && l.node === ids.node2 && l.via === "join")).toBe(true);
    // Its sealed directory named node 1 at that address; a curator of the cluster answered there as another node, and was asked by address.
    expect(node2.logs.slice(from).some((l) => l.msg.startsWith("curators of this cluster answer as other nodes than the sealed directory names") && l.addresses === node1.address)).toBe(true);
  }, 150_000);
});
