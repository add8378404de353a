// A learner that never starts cannot block the cluster (issue 46): node 2 is
// given the consensus role while its etcd cannot start (its system tree's
// etcd exits at once), so its etcd learner never catches up and every other
// join is refused. The curator leader gives the learner up after its bound
// (shortened here; LEARNER_CATCH_UP_MS in the product), says so in the
// audit trail, and node 3 joins. Node 2 keeps the role; once it can run
// etcd again and is up, the leader gives it a new learner, and node 2,
// told by its etcd that the cluster had no member for it, drops its etcd
// data and joins again, and votes.

import { afterAll, expect, test } from "bun:test";
import { chmodSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { eventually, systemTree, tempDir } from "../internal/testing/mod.ts";
import { formProcessCluster, type ProcessCluster } from "./support/process_cluster.ts";
import { ctl as runCtl } from "./support/node_process.ts";

const dir = tempDir("nodecore-learner-");
/** The leader gives a learner 15 s to catch up, and waits 3 s before a new one (the product: 5 min and 1 min). */
const TIMING = { catchUpMs: 15_000, rejoinBackoffMs: 3_000 };
let cluster: ProcessCluster | undefined;

afterAll(async () => {
  await cluster?.stop();
  dir[Symbol.dispose]();
}, 60_000);

/** out/system, but with an etcd that exits at once, as one on a full disk or in a crash loop would. */
function treeWithBrokenEtcd(): string {
  const tree = join(dir.path, "broken-system");
  const real = systemTree();
  mkdirSync(join(tree, "usr", "bin"), { recursive: true });
  for (const entry of readdirSync(real)) if (entry !== "usr") symlinkSync(join(real, entry), join(tree, entry));
  for (const entry of readdirSync(join(real, "usr"))) if (entry !== "bin") symlinkSync(join(real, "usr", entry), join(tree, "usr", entry));
  for (const entry of readdirSync(join(real, "usr", "bin"))) if (entry !== "etcd") symlinkSync(join(real, "usr", "bin", entry), join(tree, "usr", "bin", entry));
  writeFileSync(join(tree, "usr", "bin", "etcd"), "#!/bin/sh\necho 'this etcd cannot start (test/learner_process.test.ts)' >&2\nexit 1\n");
  chmodSync(join(tree, "usr", "bin", "etcd"), 0o755);
  return tree;
}

test("a learner that never starts is given up after its bound, the next join goes on, and its node joins again once it can", async () => {
  const broken = treeWithBrokenEtcd();
  cluster = await formProcessCluster(dir.path, 60, undefined, {
    consensus: 1,
    env: { NODECORE_PROCESS_CONSENSUS_JOIN_TIMING: `${TIMING.catchUpMs},${TIMING.rejoinBackoffMs}` },
    prepare: async (node) => {
      if (node.name === "node2") node.system = broken;
    },
  });
  const c = cluster;
  const [node1, node2, node3] = c.nodes as [(typeof c.nodes)[0], (typeof c.nodes)[0], (typeof c.nodes)[0]];
  const id2 = c.ids.get(node2)!;
  const id3 = c.ids.get(node3)!;
  const owner = (...args: string[]) => runCtl(c.ctlDir, "--owner-key", c.ownerKeyFile, ...args);

  // Node 2 gets the role: a learner is added, and its etcd never starts.
  expect((await owner("node", "roles", "set", id2, "consensus")).code).toBe(0);
  // While it stays a learner, node 3's join is refused.
  const refused = await owner("node", "roles", "set", id3, "consensus");
  expect(refused.code).not.toBe(0);
  expect(refused.stderr).toMatch(/one node joins etcd at a time/);

  // The leader gives it up after its bound; the trail says so; the health check names node 2.
  await eventually(
    async () => {
      const members = await c.etcdMembers(node1);
      expect(members.filter((m) => m.isLearner)).toEqual([]);
      const events = await owner("events", "-n", "200");
      expect(events.stdout).toMatch(new RegExp(`consensus .*${id2}.*etcd learner given up after \\d+ s without catching up \\(it never started\\)`));
    },
    { timeoutMs: TIMING.catchUpMs + 60_000, intervalMs: 1_000, what: "node 2's learner given up" },
  );
  const health = await owner("cluster", "health");
  expect(health.stdout).toContain(`${id2} holds the consensus role but is no voting member`);

  // Node 3 joins meanwhile, and votes.
  await eventually(async () => expect((await owner("node", "roles", "set", id3, "consensus")).code).toBe(0), { timeoutMs: 60_000, intervalMs: 1_000, what: "node 3's consensus role" });
  await eventually(
    async () => {
      const members = await c.etcdMembers(node1);
      expect(members.find((m) => m.name === id3)?.isLearner).toBe(false);
    },
    { timeoutMs: 90_000, intervalMs: 1_000, what: "node 3 voting" },
  );

  // Node 2 can run etcd again (its disk freed, its crash fixed): it gets a new learner, drops its old etcd data, joins, and votes.
  await node2.stop();
  node2.system = systemTree();
  const from = node2.logs.length;
  node2.start({ NODECORE_PROCESS_CONSENSUS_JOIN_TIMING: `${TIMING.catchUpMs},${TIMING.rejoinBackoffMs}` });
  await eventually(
    async () => {
      const members = await c.etcdMembers(node1);
      expect(
        members
          .filter((m) => !m.isLearner)
          .map((m) => m.name)
          .sort(),
      ).toEqual([c.ids.get(node1)!, id2, id3].sort());
    },
    { timeoutMs: 180_000, intervalMs: 1_000, what: "node 2 voting again" },
  );
  expect(node2.logs.slice(from).some((l) => String(l.msg).startsWith("the cluster has no etcd member for this node, which holds the consensus role"))).toBe(true);
  expect((await owner("events", "-n", "200")).stdout).toMatch(new RegExp(`consensus .*${id2}.*given a new etcd learner \\(its last was given up\\)`));
}, 420_000);
