// One node as a process on loopback: it bootstraps a cluster (real etcd, real
// curator), the owner takes ownership with out/ctl, and after a restart the
// node joins again with the same identity and its data.

import { afterAll, describe, expect, test } from "bun:test";
import { join } from "node:path";
import { readFileSync, writeFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import { NodeParametersSchema } from "../proto/gen/api/configuration_pb.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../internal/pki/mod.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { ETCD_COMMAND, NodeProcess, ctl, ctlCommand, loopbackBlock } from "./support/node_process.ts";

const dir = tempDir("nodecore-node-");
const address = loopbackBlock();
const node = new NodeProcess("node1", join(dir.path, "node1"), address(1));
const config = join(dir.path, "ctl");
const owner = generateKeyPair();

afterAll(async () => {
  await node.stop();
  dir[Symbol.dispose]();
}, 60_000);

describe("a one-node cluster of processes", () => {
  test("the node bootstraps and serves the cluster", async () => {
    node.writeParameters(create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(owner.publicKey) } } }));
    node.start();
    const up = await node.waitForLog((l) => l.msg === "node is UP" && String(l.roles).includes("consensus"), { what: "node UP with consensus" });
    expect(up.address).toBe(node.address);
  }, 90_000);

  test("the owner takes ownership and lists the node as UP with the consensus role", async () => {
    writeFileSync(join(dir.path, "owner.key"), privateKeyPem(owner.privateKey));
    const taken = await ctl(config, "--owner-key", join(dir.path, "owner.key"), "takeownership", node.address);
    expect(taken.stderr).not.toContain("ctl: the");
    expect(taken.code).toBe(0);
    const list = await ctl(config, "--owner-key", join(dir.path, "owner.key"), "node", "list", "--json");
    // Progress lines go to a terminal only; this stderr is a pipe.
    expect(list.stderr).toBe("");
    expect(list.code).toBe(0);
    const nodes = JSON.parse(list.stdout);
    expect(nodes).toEqual([expect.objectContaining({ state: "UP", address: node.address, curator: true })]);
    expect(nodes[0].roles).toContain("consensus");
  }, 60_000);

  test("after a restart the node joins with the same identity and data", async () => {
    const before = JSON.parse((await ctl(config, "--owner-key", join(dir.path, "owner.key"), "node", "list", "--json")).stdout)[0];
    await node.stop();
    const from = node.logs.length;
    node.start();
    await node.waitForLog((l) => l.msg === "found sealed configuration, joining the cluster", { from, what: "join decision" });
    await node.waitForLog((l) => l.msg === "node is UP", { from, what: "node UP after restart", timeoutMs: 90_000 });
    const after = JSON.parse((await ctl(config, "--owner-key", join(dir.path, "owner.key"), "node", "list", "--json")).stdout)[0];
    expect(after.id).toBe(before.id);
    expect(after.state).toBe("UP");
  }, 120_000);

  const etcdPid = (from: number) => Number(node.etcdPid(from));
  const running = (pid: number) => {
    try {
      return !readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.startsWith("Z");
    } catch {
      return false;
    }
  };

  test("a node process killed with SIGKILL takes its etcd with it, and starts again without help", async () => {
    const pid = etcdPid(0);
    expect(running(pid)).toBe(true);
    await node.stop("SIGKILL");
    await eventually(() => expect(running(pid)).toBe(false), { what: "etcd gone with its node" });
    const from = node.logs.length;
    node.start();
    await node.waitForLog((l) => l.msg === "node is UP", { from, what: "node UP after SIGKILL", timeoutMs: 90_000 });
  }, 120_000);

  test("an etcd of its own left running by an earlier run is killed when the node starts, and the node comes up", async () => {
    // Without setpriv on its PATH the node cannot tie etcd to itself (as on
    // a machine without util-linux), so SIGKILL leaves etcd running.
    await node.stop();
    let from = node.logs.length;
    node.start({ PATH: "/nonexistent" });
    await node.waitForLog((l) => l.msg === "node is UP", { from, what: "node UP without setpriv", timeoutMs: 90_000 });
    const orphan = etcdPid(from);
    // etcd's output is a pipe to the node: once the node is gone, etcd's next
    // log line ends it by SIGPIPE, and under load ("apply request took too
    // long") that can come at once. Stopped, the leftover writes nothing and
    // stays, holding its ports and data as a hung one would.
    process.kill(orphan, "SIGSTOP");
    try {
      await node.stop("SIGKILL");
      expect(running(orphan)).toBe(true);
      from = node.logs.length;
      node.start();
      await node.waitForLog((l) => l.msg === "killed a leftover of an earlier run" && Number(l.pid) === orphan, { from, what: "leftover etcd killed" });
      await node.waitForLog((l) => l.msg === "node is UP", { from, what: "node UP after the leftover", timeoutMs: 90_000 });
      expect(running(orphan)).toBe(false);
    } finally {
      // Whatever failed above, the stopped etcd does not outlive the test holding its ports.
      if (running(orphan)) process.kill(orphan, "SIGKILL");
    }
    // etcd started once: no "address already in use" crash loop.
    expect(node.logs.slice(from).filter((l) => l.msg === "process started" && l.command === ETCD_COMMAND).length).toBe(1);
  }, 180_000);

  test("ctl node reboot starts the node's tree again in its process, a follower of its logs follows it back, and ctl node poweroff ends the process", async () => {
    const asOwner = (...args: string[]) => ctl(config, "--owner-key", join(dir.path, "owner.key"), ...args);
    const id = JSON.parse((await asOwner("node", "list", "--json")).stdout)[0].id as string;
    // A follower of the node's status log, from before the reboot.
    const follower = Bun.spawn(ctlCommand(config, "--owner-key", join(dir.path, "owner.key"), "node", "logs", id, "root.status", "-f", "-n", "1"), { stdout: "pipe", stderr: "pipe" });
    const followed = { out: "", err: "" };
    const reading = Promise.all([
      (async () => {
        for await (const chunk of follower.stdout) followed.out += new TextDecoder().decode(chunk);
      })(),
      (async () => {
        for await (const chunk of follower.stderr) followed.err += new TextDecoder().decode(chunk);
      })(),
    ]);
    await eventually(() => expect(followed.out).toContain("root.status"), { timeoutMs: 30_000, what: "the follower's first line" });
    let from = node.logs.length;
    const rebooted = await asOwner("node", "reboot", id);
    expect(rebooted.stdout).toBe(`${id} is stopping its services and will restart\n`);
    expect(rebooted.code).toBe(0);
    await node.waitForLog((l) => l.msg === "stopping the node" && l.action === "restart" && l.why === "owner asked through NodeManagement.Reboot", { from, what: "reboot asked" });
    await node.waitForLog((l) => l.msg === "starting the node again (process mode)", { from, what: "tree started again" });
    await node.waitForLog((l) => l.msg === "node is UP", { from, what: "node UP after the reboot", timeoutMs: 90_000 });
    try {
      // The follower said the node went and came back, and printed the new boot's lines, each once.
      await eventually(() => expect(followed.err).toMatch(new RegExp(`^ctl: ${id} went away \\(.+\\); following it again once it is back\\nctl: ${id} is back; following its logs again\\n$`)), {
        timeoutMs: 60_000,
        what: "the follower's notes",
      });
      await eventually(() => expect(followed.out).toMatch(/storage mounted, node is part of the cluster[\s\S]*node is UP/), { timeoutMs: 60_000, what: "the new boot, followed" });
      const lines = followed.out.trim().split("\n");
      expect(new Set(lines).size).toBe(lines.length);
    } finally {
      follower.kill("SIGINT");
      await follower.exited;
      await reading;
    }

    // With --wait, ctl returns once the node has booted again and is HEALTHY: the node is the cluster here, so ctl waits out its absence too.
    from = node.logs.length;
    const waited = await asOwner("node", "reboot", id, "--wait");
    expect(waited.stderr).toBe("");
    expect(waited.stdout).toMatch(new RegExp(`^${id} rebooted and is HEALTHY again after \\d+\\.\\d s\\n$`));
    expect(waited.code).toBe(0);
    // It returned after the new boot was UP, not before.
    expect(node.logs.slice(from).some((l) => l.msg === "starting the node again (process mode)")).toBe(true);
    expect(node.logs.slice(from).some((l) => l.msg === "node is UP")).toBe(true);

    from = node.logs.length;
    await eventually(
      async () => {
        const result = await asOwner("node", "poweroff", id);
        if (result.code !== 0) throw new Error(result.stderr);
      },
      { timeoutMs: 30_000, intervalMs: 500, what: "poweroff accepted" },
    );
    await node.waitForLog((l) => l.msg === "stopping the node" && l.action === "poweroff", { from, what: "power-off asked" });
    // A node process powered off exits 0 (runNode in cmd/init/main.ts).
    await eventually(() => expect(node.exitCode).toBe(0), { timeoutMs: 60_000, what: "the node process gone" });
  }, 180_000);
});
