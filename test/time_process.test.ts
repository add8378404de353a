// Time servers from the node parameters, as an operator sets them: `ctl
// params bootstrap --time-server`, a node process that syncs with a real
// chronyd serving NTP on a loopback address before it enrols (its boot
// gate), keeps the list on its ESP, and syncs with it again when it joins
// after a restart (no parameters read then). A node process only measures
// (chronyd -x): the host's clock is never set.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { generateKeyPair, privateKeyPem } from "../internal/pki/mod.ts";
import { spawnChild } from "../internal/supervisor/mod.ts";
import { tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, ctl, loopbackBlock } from "./support/node_process.ts";

const dir = tempDir("nodecore-time-");
const address = loopbackBlock();
const server = address(9);
const node = new NodeProcess("node1", join(dir.path, "node1"), address(1));
const config = join(dir.path, "ctl");
const ownerKey = join(dir.path, "owner.key");
let chronyd: ReturnType<typeof spawnChild> | undefined;

beforeAll(async () => {
  writeFileSync(ownerKey, privateKeyPem(generateKeyPair().privateKey));
  const conf = join(dir.path, "server.conf");
  writeFileSync(conf, ["local stratum 8", "allow 127.0.0.0/8", `bindaddress ${server}`, "port 123", "cmdport 0", `pidfile ${join(dir.path, "server.pid")}`, ""].join("\n"));
  chronyd = spawnChild(["chronyd", "-d", "-x", "-u", "root", "-f", conf]);
  await Bun.sleep(500);
});
afterAll(async () => {
  await node.stop();
  chronyd?.kill();
  await chronyd?.exited;
  dir[Symbol.dispose]();
}, 60_000);

describe("time servers from the node parameters", () => {
  test("ctl refuses a list it could not use, in one line", async () => {
    const bad = await ctl(config, "--owner-key", ownerKey, "params", "bootstrap", join(dir.path, "bad.pb"), "--time-server", `${server},ntp example`);
    expect(bad.code).not.toBe(0);
    expect(bad.stderr.trim().split("\n")).toHaveLength(1);
    expect(bad.stderr).toContain('time server "ntp example" is neither an IP address nor a host name');
  });

  test("a node bootstrapped with --time-server syncs before it enrols, and keeps the list on its ESP", async () => {
    const file = join(dir.path, "bootstrap.pb");
    const written = await ctl(config, "--owner-key", ownerKey, "params", "bootstrap", file, "--time-server", server);
    expect(written.code).toBe(0);
    // The node reads the bytes ctl wrote, from its ESP.
    mkdirSync(dirname(node.layout.esp.parameters), { recursive: true });
    copyFileSync(file, node.layout.esp.parameters);
    node.start();
    await node.waitForLog((l) => l.msg === "starting chronyd" && l.servers === server, { what: "chronyd started with the parameters' server" });
    const gate = await node.waitForLog((l) => l.msg === "the clock is synced; enrolling", { what: "the boot gate opened", timeoutMs: 30_000 });
    const up = await node.waitForLog((l) => l.msg === "node is UP", { what: "node UP" });
    expect(Date.parse(gate.time)).toBeLessThanOrEqual(Date.parse(up.time));
    expect(readFileSync(node.layout.esp.timeServers, "utf8")).toBe(`${server}\n`);
    const status = await node.waitForLog((l) => l.msg === "status pushed" && String(l.services).includes("time=synced"), { what: "the time line synced in the node's status" });
    expect(String(status.services)).toContain("time=synced");
  }, 90_000);

  test("after a restart it joins, and syncs with the kept list", async () => {
    await node.stop();
    const from = node.logs.length;
    node.start();
    await node.waitForLog((l) => l.msg === "found sealed configuration, joining the cluster", { from, what: "join decision" });
    await node.waitForLog((l) => l.msg === "starting chronyd" && l.servers === server, { from, what: "chronyd started with the kept server" });
    await node.waitForLog((l) => l.msg === "the clock is synced; enrolling", { from, what: "the boot gate opened again", timeoutMs: 30_000 });
    await node.waitForLog((l) => l.msg === "node is UP", { from, what: "node UP after restart", timeoutMs: 90_000 });
  }, 120_000);
});
