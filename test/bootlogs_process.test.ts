// What a node logged before it rebooted, as an operator reads it: a node
// process rebooted through ctl keeps its last boot's logs on its data
// partition; ctl node logs --boot -1 prints them, with when and why that
// boot ended, and ctl node describe names the end.

import { afterAll, expect, test } from "bun:test";
import { join } from "node:path";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode } from "./support/node_process.ts";

const dir = tempDir("nodecore-bootlogs-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(41));
const { ctl, bootstrap } = ownedNode(node, dir.path);

afterAll(async () => {
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

test("after ctl node reboot, --boot -1 shows the previous boot's last lines and why it ended; describe names it", async () => {
  const id = String((await bootstrap()).node);
  // Before any reboot there is no boot -1.
  const none = await ctl("node", "logs", id, "--boot", "-1");
  expect(none.code).toBe(1);
  expect(none.stderr.trim()).toBe(`ctl: this node kept no boot -1: it has not booted that often since its data partition was set up [NOT_FOUND]`);

  const rebooted = await ctl("node", "reboot", id, "--wait");
  expect(rebooted.stderr.replace(/\r\x1b\[2K[^\n]*/g, "")).toBe("");
  expect(rebooted.code).toBe(0);

  const previous = await ctl("node", "logs", id, "--boot", "-1", "-n", "400");
  expect(previous.code).toBe(0);
  expect(previous.stderr.trim()).toMatch(new RegExp(`^ctl: boot -1 of ${id}: began \\S+Z \\(nodecore \\S+\\), ended \\S+Z: reboot: owner asked through NodeManagement\\.Reboot$`));
  const lines = previous.stdout.trim().split("\n");
  expect(lines.some((l) => / root stopping the node /.test(l) && /why="owner asked through NodeManagement\.Reboot"/.test(l))).toBe(true);
  expect(lines.some((l) => / root\.status node is UP /.test(l))).toBe(true);
  // This boot's logs begin after the reboot: its "stopping" line is not among them.
  const current = (await ctl("node", "logs", id, "root", "-n", "50")).stdout;
  expect(current).not.toContain("stopping the node");

  // A path filter works on a past boot too; follow does not.
  const status = (await ctl("node", "logs", id, "root.status", "--boot", "-1")).stdout.trim().split("\n");
  expect(status.every((l) => / root\.status /.test(l))).toBe(true);
  const follow = await ctl("node", "logs", id, "--boot", "-1", "-f");
  expect(follow.code).toBe(2);
  expect(follow.stderr.trim()).toBe("ctl: --follow reads this boot only; leave out --boot, or --follow");

  // The reboot is in the cluster's audit trail, as the node reported it.
  // The node reports it when its curator connection is back after the
  // reboot: a fact that comes in its own time, waited for.
  const reboot = await eventually(
    async () => {
      const trail = (await ctl("events", "--node", id, "--json")).stdout
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as { kind: string; actor: string; method: string; result: string });
      const found = trail.find((e) => e.method === "NodeManagement/Reboot");
      expect(found).toBeDefined();
      return found!;
    },
    { timeoutMs: 60_000, what: "the reboot in the audit trail, as the node reported it" },
  );
  expect(reboot).toMatchObject({ kind: "call", actor: `owner (as ${id} reports)`, result: "OK" });
  const described = (await ctl("node", "describe", id)).stdout;
  expect(described).toMatch(/^ +previous-boot +ended +\S+Z: reboot: owner asked through NodeManagement\.Reboot \(ctl node logs --boot -1\)$/m);
}, 180_000);
