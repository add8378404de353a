// Scheduled backups on a node process: the owner names the node and the
// interval; the node writes a backup onto its data partition, proves it
// restores, and ctl cluster info says so; the owner's key reads the file.

import { afterAll, expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { basename, join } from "node:path";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "./support/node_process.ts";

const dir = tempDir("nodecore-backups-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(31));
const { ctl, bootstrap } = ownedNode(node, dir.path);

// An HTTP PUT target of the test's own on loopback: it stores, or (under /full/) is full.
const received = new Map<string, Uint8Array>();
const target = Bun.serve({
  hostname: "127.0.0.1",
  port: 0,
  async fetch(request) {
    const url = new URL(request.url);
    if (url.pathname.startsWith("/full/")) return new Response("", { status: 507, statusText: "Insufficient Storage" });
    received.set(`${url.pathname}${url.search}`, new Uint8Array(await request.arrayBuffer()));
    return new Response("", { status: 201 });
  },
});

afterAll(async () => {
  target.stop(true);
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

let nodeId = "";

test("a scheduled backup is written on the named node, proven to restore, shown by cluster info, and readable with the owner key", async () => {
  const id = String((await bootstrap()).node);
  nodeId = id;
  // A node that boots well loses no runnable on the way (the supervision line once died at every boot, a binding used before it was set).
  expect(node.logs.filter((l) => l.msg === "runnable died").map((l) => `${l.component}: ${l.error}`)).toEqual([]);
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

test("each proven backup goes to the owner's HTTP target; a full one is reported and deletes nothing, and a new target gets the newest proven backup", async () => {
  type Backups = { lastProven?: { file: string }; lastUploaded?: { file: string; uploadedTo: string }; lastError?: string };
  const backups = async () => (JSON.parse((await ctl("cluster", "info", "--json")).stdout) as { backups: Backups }).backups;
  const local = () =>
    readdirSync(join(node.layout.data.path, "backups"))
      .filter((n) => n.endsWith(".backup"))
      .sort();
  const before = local();
  expect(before.length).toBeGreaterThan(0);
  const base = `http://127.0.0.1:${target.port}`;

  // Bad URLs never reach the cluster.
  const bad = await ctl("cluster", "schedule-backups", "--every", "60", "--node", nodeId, "--upload", "ftp://store.example/");
  expect(bad.code).not.toBe(0);
  expect(bad.stderr.trim()).toBe("ctl: --upload: its scheme is ftp:; use http or https");

  // A full target: the failure is reported in one line, and no backup is deleted.
  const full = await ctl("cluster", "schedule-backups", "--every", "60", "--keep", "2", "--node", nodeId, "--upload", `${base}/full/`);
  expect(full.stdout.trim()).toBe(`${nodeId} backs the cluster up every 60 min and keeps 2, sends each proven one to ${base}/full/; ctl cluster info says how it goes`);
  const failed = await eventually(
    async () => {
      const b = await backups();
      if (!b.lastError) throw new Error("no failure reported yet");
      return b;
    },
    { timeoutMs: 60_000, intervalMs: 1_000, what: "the full target reported" },
  );
  expect(failed.lastError).toBe(`the backup target ${base}/full/${basename(failed.lastProven!.file)} answered HTTP 507 Insufficient Storage (the target is full)`);
  expect(failed.lastUploaded).toBeUndefined();
  expect(local()).toEqual(before);
  expect((await ctl("cluster", "info")).stdout).toContain("last received by the target: none yet");

  // A new target (its secret in the query) gets the newest proven backup without waiting for the next one.
  await ctl("cluster", "schedule-backups", "--every", "60", "--keep", "2", "--node", nodeId, "--upload", `${base}/cluster/?token=s3cret`);
  const sent = await eventually(
    async () => {
      const b = await backups();
      if (!b.lastUploaded) throw new Error(`nothing received yet${b.lastError ? ` (${b.lastError})` : ""}`);
      return b;
    },
    { timeoutMs: 60_000, intervalMs: 1_000, what: "the newest proven backup at the target" },
  );
  expect(sent.lastError).toBeUndefined();
  const name = basename(sent.lastProven!.file);
  expect(sent.lastUploaded!.uploadedTo).toBe(`${base}/cluster/${name}`);
  expect(Buffer.from(received.get(`/cluster/${name}?token=s3cret`)!).equals(readFileSync(sent.lastProven!.file))).toBe(true);
  const text = (await ctl("cluster", "info")).stdout;
  expect(text).toContain(`each proven one sent to ${base}/cluster/`);
  expect(text).toContain(`(${base}/cluster/${name})`);
  expect(text).not.toContain("s3cret");
  expect(local()).toEqual(before);
}, 180_000);
