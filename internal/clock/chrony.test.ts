// Time sync against a real chronyd serving NTP on a loopback address (the
// test's own, as root), with the node's chronyd measuring only (-x): this
// host's clock is never set.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { spawnChild, supervise } from "../supervisor/mod.ts";
import { eventually, tempDir } from "../testing/mod.ts";
import { firstAnswer } from "./first_answer.ts";
import { chronyConfig, chronyEvent, describeSync, nextSync, timeServerProblem, timeSyncRunnable, type TimeSync } from "./chrony.ts";
import { timeSyncGate } from "./sync_gate.ts";

/** The test's NTP server: loopback, so nothing leaves the host. */
const SERVER = "127.0.0.123";

describe("chrony's configuration and lines", () => {
  test("servers are IP addresses or host names; nothing else reaches the configuration", () => {
    expect(timeServerProblem("10.0.0.1")).toBeUndefined();
    expect(timeServerProblem("fd00::1")).toBeUndefined();
    expect(timeServerProblem("ntp.example.org")).toBeUndefined();
    expect(timeServerProblem("")).toBe("is empty");
    for (const bad of ["ntp.example.org\nallow all", "a b", "-x", "ntp..org", "x".repeat(254)]) expect(timeServerProblem(bad)).toBeDefined();
    expect(() => chronyConfig({ servers: ["10.0.0.1\ncmdallow all"], stateDir: "/s" })).toThrow("time server");
    const text = chronyConfig({ servers: ["10.0.0.1", "ntp.example.org"], stateDir: "/s" });
    expect(text).toContain("server 10.0.0.1 iburst maxpoll 6\nserver ntp.example.org iburst maxpoll 6\nmakestep 1 3\nport 0\ncmdport 0\n");
  });

  test("chronyd's lines become states", () => {
    expect(chronyEvent("2026-11-25T15:26:59Z Selected source 10.0.0.1")).toEqual({ kind: "selected", source: "10.0.0.1" });
    expect(chronyEvent("System clock wrong by -7200.001234 seconds, adjustment started")).toEqual({ kind: "correction", seconds: -7200.001234, stepped: false });
    expect(chronyEvent("2026-11-25T15:26:59Z System clock was stepped by 7199.998 seconds")).toEqual({ kind: "correction", seconds: 7199.998, stepped: true });
    expect(chronyEvent("Can't synchronise: no selectable sources")).toMatchObject({ kind: "unselectable" });
    expect(chronyEvent("chronyd version 4.3 starting")).toBeUndefined();
    let sync: TimeSync = { state: "starting", servers: ["10.0.0.1"] };
    sync = nextSync(sync, { kind: "correction", seconds: -7200, stepped: true }, 1000);
    sync = nextSync(sync, { kind: "selected", source: "10.0.0.1" }, 2000);
    expect(sync).toEqual({ state: "synced", source: "10.0.0.1", sinceMs: 2000, correctionS: -7200 });
    expect(describeSync(sync).message).toBe("synced to 10.0.0.1 since 1970-01-01T00:00:02.000Z; corrected by -7200 s");
    expect(describeSync({ state: "no-servers" })).toMatchObject({ state: "unsynced" });
  });
});

describe("chronyd under the supervisor", () => {
  const dir = tempDir("nodecore-chrony-");
  let server: ReturnType<typeof spawnChild> | undefined;
  beforeAll(async () => {
    const conf = join(dir.path, "server.conf");
    writeFileSync(conf, ["local stratum 8", "allow 127.0.0.0/8", `bindaddress ${SERVER}`, "port 123", "cmdport 0", `pidfile ${join(dir.path, "server.pid")}`, ""].join("\n"));
    server = spawnChild(["chronyd", "-d", "-x", "-u", "root", "-f", conf]);
    await Bun.sleep(500);
  });
  afterAll(async () => {
    server?.kill();
    await server?.exited;
    dir[Symbol.dispose]();
  });

  test("synced to the server: the time line says so, and the boot gate opens", async () => {
    const sync = new Value<TimeSync>();
    const lines: string[] = [];
    const { logger, entries } = captureLogger("root");
    const supervisor = supervise(
      timeSyncRunnable({ servers: async () => [SERVER], stateDir: join(dir.path, "node"), sync, report: (state, message) => lines.push(`${state}: ${message}`), setClock: false, fastPoll: true }),
      { logger },
    );
    try {
      const gate = await timeSyncGate(sync, { timeoutMs: 20_000 });
      if (gate !== "synced") console.error(entries.map((e) => `${e.component} ${e.message} ${JSON.stringify(e.fields)}`).join("\n"));
      expect(gate).toBe("synced");
      expect(sync.peek()).toMatchObject({ state: "synced", source: SERVER });
      await eventually(() => expect(lines.at(-1)).toStartWith(`synced: synced to ${SERVER} since `));
      expect(lines[0]).toBe(`starting: syncing with ${SERVER}`);
      // The gate opened on the first query's answer, before chronyd started.
      const said = entries.map((e) => e.message);
      const agreed = said.indexOf("the first server's answer agrees with the clock");
      expect(agreed).toBeGreaterThanOrEqual(0);
      expect(agreed).toBeLessThan(said.indexOf("starting chronyd"));
    } finally {
      await supervisor.stop();
    }
  }, 30_000);

  test("the first query: chronyd serving NTP answers it, with the offset of a clock it shares (about 0), though a dead server is named first", async () => {
    // A loaded test machine can take longer than the node's bound on the
    // round trip (first_answer.test.ts tests that bound); this tests the exchange.
    const answer = await firstAnswer(["127.0.0.124", SERVER], { timeoutMs: 10_000, maxDelayMs: 10_000 });
    expect(answer?.server).toBe(SERVER);
    expect(Math.abs(answer!.offsetMs)).toBeLessThan(answer!.delayMs / 2 + 100);
    expect(answer!.delayMs).toBeGreaterThanOrEqual(0);
    expect(await firstAnswer(["127.0.0.124"], { timeoutMs: 200 })).toBeUndefined();
    expect(await firstAnswer([])).toBeUndefined();
  });

  test("a server out of reach when chronyd started and answering later: the node syncs at the next ask, not at chronyd's next polls a minute apart", async () => {
    const LATE = "127.0.0.125";
    const sync = new Value<TimeSync>();
    const { logger, entries } = captureLogger("root");
    const supervisor = supervise(
      timeSyncRunnable({ servers: async () => [LATE], stateDir: join(dir.path, "late"), sync, report: () => {}, setClock: false, recovery: { probeMs: 500, afterMs: 1_000 } }),
      { logger },
    );
    let late: ReturnType<typeof spawnChild> | undefined;
    try {
      // Past chronyd's iburst (four asks two seconds apart): its next ask is a poll interval (64 s) away.
      await Bun.sleep(12_000);
      expect(sync.peek()?.state).not.toBe("synced");
      const conf = join(dir.path, "late.conf");
      writeFileSync(conf, ["local stratum 8", "allow 127.0.0.0/8", `bindaddress ${LATE}`, "port 123", "cmdport 0", `pidfile ${join(dir.path, "late.pid")}`, ""].join("\n"));
      late = spawnChild(["chronyd", "-d", "-x", "-u", "root", "-f", conf]);
      // chronyd alone would not ask before about a minute from now.
      await eventually(() => expect(sync.peek()).toMatchObject({ state: "synced", source: LATE }), { timeoutMs: 15_000 });
      const restarted = entries.find((e) => e.message === "restart requested");
      expect(String(restarted?.fields?.reason)).toContain(`${LATE} answers, and chronyd has not synced`);
    } finally {
      await supervisor.stop();
      late?.kill();
      await late?.exited;
    }
  }, 45_000);

  test("no servers: reported, never fatal, and the gate does not wait; a server that never answers: the gate times out", async () => {
    const none = new Value<TimeSync>();
    const lines: string[] = [];
    const { logger, entries } = captureLogger("root");
    const idle = supervise(timeSyncRunnable({ servers: async () => [], stateDir: join(dir.path, "none"), sync: none, report: (s, m) => lines.push(`${s}: ${m}`), setClock: false }), { logger });
    try {
      expect(await timeSyncGate(none, { timeoutMs: 5_000 })).toBe("no-servers");
      expect(lines).toEqual(["unsynced: no time servers: neither the DHCP lease (option 42) nor the node parameters name any"]);
      expect(idle.dump().find((r) => r.path === "root")?.state).toBe("healthy");
    } finally {
      await idle.stop();
    }
    const silent = new Value<TimeSync>();
    const quiet = supervise(timeSyncRunnable({ servers: async () => ["127.0.0.124"], stateDir: join(dir.path, "silent"), sync: silent, report: () => {}, setClock: false, fastPoll: true }), {
      logger,
    });
    try {
      expect(await timeSyncGate(silent, { timeoutMs: 3_000 })).toBe("timed-out");
      expect(silent.peek()?.state).not.toBe("synced");
    } finally {
      await quiet.stop();
    }
  }, 30_000);
});
