// Scheduled backups on a node process: the owner names the node and the
// interval; the node writes a backup onto its data partition, proves it
// restores, and ctl cluster info says so; the owner's key reads the file.

import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "./support/node_process.ts";

const dir = tempDir("nodecore-backups-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(31));
const { ctl, bootstrap } = ownedNode(node, dir.path);

afterAll(async () => {
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

test("a scheduled backup is written on the named node, proven to restore, shown by cluster info, and readable with the owner key", async () => {
  const id = String((await bootstrap()).node);
  const off = await ctl("cluster", "info");
  expect(off.stdout).toContain("scheduled backups: off (ctl cluster schedule-backups)");

  const set = await ctl("cluster", "schedule-backups", "--every", "60", "--keep", "2", "--node", id);
  expect(set.stderr).toBe("");
  expect(set.stdout.trim()).toBe(`${id} backs the cluster up every 60 min and keeps 2; ctl cluster info says how it goes`);

  const info = await eventually(
    async () => {
      const json = JSON.parse((await ctl("cluster", "info", "--json")).stdout) as { backups: { lastProven?: { file: string; etcdRevision: number }; lastError?: string } };
      if (json.backups.lastError) throw new Error(`the backup failed: ${json.backups.lastError}`);
      if (!json.backups.lastProven) throw new Error("no proven backup yet");
      return json.backups;
    },
    { timeoutMs: 90_000, intervalMs: 1_000, what: "a proven scheduled backup" },
  );
  expect(info.lastProven!.file.startsWith(join(node.layout.data.path, "backups"))).toBe(true);
  expect(info.lastProven!.etcdRevision).toBeGreaterThan(0);
  const text = (await ctl("cluster", "info")).stdout;
  expect(text).toContain(`scheduled backups: every 60 min by ${id}, keeping 2`);
  expect(text).toMatch(/last proven to restore: \S+, etcd revision \d+, /);

  // The node cannot read what it wrote; the owner can.
  const checked = await ctl("cluster", "check-backup", info.lastProven!.file);
  expect(checked.stderr).toBe("");
  expect(checked.stdout).toContain("readable with this owner key, etcd's checksum matches");
  expect(checked.stdout).toContain(`etcd revision: ${info.lastProven!.etcdRevision}`);

  // Refusals, each in one line: a node that is no consensus member, nonsense.
  const refused = await ctl("cluster", "schedule-backups", "--every", "60", "--node", "node-0123456789abcdef");
  expect(refused.code).toBe(1);
  expect(refused.stderr.trim().split("\n")).toHaveLength(1);
  expect((await ctl("cluster", "schedule-backups", "--every", "0")).stdout.trim()).toBe("scheduled backups off");
}, 180_000);
