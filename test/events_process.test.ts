// ctl events on three node processes, as an operator reads the audit trail:
// a follower started first sees the owner delete a node, with the owner as
// the actor; a stranger's refused calls are recorded; --node filters.

import { afterAll, beforeAll, expect, test } from "bun:test";
import { join } from "node:path";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { generateKeyPair, privateKeyPem } from "../internal/pki/mod.ts";
import { ctl as runCtl, ctlCommand } from "./support/node_process.ts";
import { formProcessCluster, type ProcessCluster } from "./support/process_cluster.ts";
import { writeFileSync } from "node:fs";

const dir = tempDir("nodecore-events-");
let cluster: ProcessCluster;

beforeAll(async () => {
  cluster = await formProcessCluster(dir.path, 120, () => {}, { consensus: 1 });
}, 240_000);
afterAll(async () => {
  await cluster?.stop();
  dir[Symbol.dispose]();
}, 60_000);

type Row = { time: string; kind: string; actor: string; method: string; node: string; detail: string; result: string };

test("a follower sees the owner delete a node, with the owner as the actor; the trail shows the approvals and role changes of the formation", async () => {
  const node3 = cluster.nodes[2]!;
  const id3 = cluster.ids.get(node3)!;
  const follower = Bun.spawn(ctlCommand(cluster.ctlDir, "--owner-key", cluster.ownerKeyFile, "events", "-f", "-n", "1", "--json"), { stdout: "pipe", stderr: "pipe" });
  const seen: Row[] = [];
  const reading = (async () => {
    let buffer = "";
    for await (const chunk of follower.stdout) {
      buffer += new TextDecoder().decode(chunk);
      for (let at = buffer.indexOf("\n"); at >= 0; at = buffer.indexOf("\n")) {
        seen.push(JSON.parse(buffer.slice(0, at)) as Row);
        buffer = buffer.slice(at + 1);
      }
    }
  })();
  try {
    // The newest event first (another may follow it at once: the follower is live from there).
    await eventually(() => expect(seen.length).toBeGreaterThanOrEqual(1), { timeoutMs: 30_000 });
    await node3.stop();
    await cluster.ctl("node", "delete", id3);
    const deleted = await eventually(
      () => {
        const row = seen.find((r) => r.method === "Management/DeleteNode");
        expect(row).toBeDefined();
        return row!;
      },
      { timeoutMs: 30_000, intervalMs: 50, what: "the delete, followed" },
    );
    expect(deleted).toMatchObject({ kind: "call", actor: "owner", node: id3, result: "OK" });
  } finally {
    follower.kill();
    await reading.catch(() => {});
  }

  // The trail from the start: the formation's approvals and the consensus role, each with the owner as the actor.
  const all = (await cluster.ctl("events", "-n", "1000", "--json")).stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Row);
  const approvals = all.filter((r) => r.method === "Management/ApproveNode");
  expect(approvals.map((r) => r.node).sort()).toEqual([cluster.ids.get(cluster.nodes[1]!)!, id3].sort());
  expect(approvals.every((r) => r.actor === "owner" && r.result === "OK")).toBe(true);
  // --node: only what concerns that node.
  const about = (await cluster.ctl("events", "--node", id3, "--json")).stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l) as Row);
  expect(about.length).toBeGreaterThanOrEqual(2);
  expect(about.every((r) => r.node === id3)).toBe(true);
  // For people: one line each, time first.
  const text = (await cluster.ctl("events", "--node", id3)).stdout.trim().split("\n");
  expect(text.at(-1)).toMatch(new RegExp(`^\\d{4}-\\d\\d-\\d\\dT\\S+Z  call     owner  Management/DeleteNode  ${id3}  .*OK$`));
}, 120_000);

test("a stranger's refused calls are in the trail, under its address", async () => {
  const strangerKey = join(dir.path, "stranger.key");
  writeFileSync(strangerKey, privateKeyPem(generateKeyPair().privateKey));
  const refused = await runCtl(join(dir.path, "stranger"), "--owner-key", strangerKey, "takeownership", cluster.nodes[0]!.address);
  expect(refused.code).not.toBe(0);
  const rows = await eventually(
    async () => {
      const list = (await cluster.ctl("events", "-n", "1000", "--json")).stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as Row);
      const found = list.filter((r) => r.kind === "refusal");
      expect(found.length).toBeGreaterThan(0);
      return found;
    },
    { timeoutMs: 30_000, what: "a refusal in the trail" },
  );
  expect(rows[0]!.actor).toMatch(/^(an unverified key|anonymous) from 127\.\d+\.\d+\.\d+$/);
  expect(rows[0]!.result).toMatch(/^(PERMISSION_DENIED|UNAUTHENTICATED): /);
}, 60_000);

test("what the curator leader sees is in the trail too: a node timing out, booting again and coming back", async () => {
  const node2 = cluster.nodes[1]!;
  const id2 = cluster.ids.get(node2)!;
  const about = async () =>
    (await cluster.ctl("events", "--node", id2, "-n", "1000", "--json")).stdout
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l) as Row);
  await node2.stop("SIGKILL");
  await eventually(async () => expect((await about()).some((r) => r.kind === "health" && r.detail === "HEALTHY → HEARTBEAT_TIMEOUT")).toBe(true), {
    timeoutMs: 60_000,
    what: "node2's timeout in the trail",
  });
  node2.start();
  // Two facts, seen apart: health comes back with the first heartbeat, the
  // new boot with the node's first status report, in either order.
  const rows = await eventually(
    async () => {
      const list = await about();
      expect(list.some((r) => r.kind === "health" && r.detail === "HEARTBEAT_TIMEOUT → HEALTHY")).toBe(true);
      expect(list.some((r) => r.kind === "boot")).toBe(true);
      return list;
    },
    { timeoutMs: 90_000, what: "node2 back in the trail, and its new boot" },
  );
  const boot = rows.find((r) => r.kind === "boot");
  expect(boot?.detail).toMatch(/^began a new boot at \d{4}-\d\d-\d\dT\S+Z$/);
  const leader = rows.find((r) => r.kind === "health")!.actor;
  expect(leader).toMatch(/^curator node-[0-9a-f]{16}$/);
}, 180_000);
