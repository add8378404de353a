// ctl node reset on node processes: a consensus member leaves etcd first,
// is deleted, forgets the cluster, and starts again with no parameters.

import { afterAll, expect, test } from "bun:test";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { fromBinary } from "@bufbuild/protobuf";
import { NodeParametersSchema } from "../proto/gen/api/configuration_pb.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "./support/node_process.ts";
import { etcdMembersVia } from "./support/process_cluster.ts";

const dir = tempDir("nodecore-reset-");
const address = loopbackBlock();
const node1 = new NodeProcess("node1", join(dir.path, "node1"), address(41));
const node2 = new NodeProcess("node2", join(dir.path, "node2"), address(42));
const { ctl, bootstrap } = ownedNode(node1, dir.path);

afterAll(async () => {
  await Promise.all([node1.stop(), node2.stop()]);
  dir[Symbol.dispose]();
}, 60_000);

test("a consensus member is reset: it leaves etcd, is deleted, forgets the cluster and its key check, and starts again with no parameters", async () => {
  const id1 = String((await bootstrap()).node);
  const paramsFile = join(dir.path, "register.pb");
  expect((await ctl("params", "register", paramsFile)).code).toBe(0);
  node2.writeParameters(fromBinary(NodeParametersSchema, readFileSync(paramsFile)));
  node2.start();
  const waiting = await node2.waitForLog((l) => l.msg.startsWith("waiting for the owner to approve node"));
  const id2 = String(waiting.msg).split(" ")[7]!;
  expect((await ctl("node", "approve", id2)).code).toBe(0);
  await node2.waitForLog((l) => l.msg === "node is UP");
  // The only consensus member cannot go: the cluster's data would go with it.
  const refused = await ctl("node", "reset", id1);
  expect(refused.code).toBe(1);
  expect(refused.stderr.trim()).toBe(`ctl: ${id1} is the cluster's only consensus member: resetting it would lose the cluster's data (back it up, and give another node the consensus role first)`);
  await eventually(async () => expect((await ctl("node", "roles", "set", id2, "consensus")).code).toBe(0), { timeoutMs: 60_000, intervalMs: 500 });
  await node2.waitForLog((l) => l.msg === "etcd is serving", { timeoutMs: 90_000 });
  await eventually(async () => expect((await etcdMembersVia(node1)).filter((m) => !m.isLearner)).toHaveLength(2), { timeoutMs: 60_000 });

  const from = node2.logs.length;
  const reset = await ctl("node", "reset", id2, "--wipe");
  expect(reset.stderr).toContain(`ctl: ${id2} runs no etcd member any more`);
  expect(reset.stderr).toContain(`ctl: ${id2} deleted from the cluster`);
  expect(reset.stderr).toContain("ctl: the sealed configuration (node half of the disk key, join key): overwritten and deleted");
  expect(reset.stderr).toContain("ctl: the data directory's key check: deleted");
  expect(reset.code).toBe(0);
  expect(reset.stdout.trim()).toBe(`${id2} was reset and wiped; it reboots with no parameters`);

  expect((await etcdMembersVia(node1)).map((m) => m.name)).toEqual([id1]);
  const list = JSON.parse((await ctl("node", "list", "--json")).stdout) as { id: string }[];
  expect(list.map((n) => n.id)).toEqual([id1]);
  expect(existsSync(node2.layout.esp.sealed)).toBe(false);
  expect(existsSync(node2.layout.esp.parameters)).toBe(false);
  // It starts its tree again, as a reboot, and finds nothing to join with.
  await node2.waitForLog((l) => l.msg === "cannot enrol: bad node parameters" && String(l.error).startsWith("no node parameters"), { from, timeoutMs: 60_000, what: "no parameters after the reset" });
}, 240_000);
