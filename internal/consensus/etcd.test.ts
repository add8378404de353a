// A real etcd member (Debian's etcd binary) on loopback with mutual TLS.

import { afterEach, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { freeSpace } from "../localstorage/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { runCommand, supervise, untilCancelled, type Supervisor } from "../supervisor/mod.ts";
import { eventually, fillFileSystem, freePort, tempDir, treeEtcd } from "../testing/mod.ts";
import {
  clientUrl,
  connectEtcd,
  createEtcdCA,
  describeMember,
  ETCD_MIN_FREE_BYTES,
  etcdArgs,
  issueMemberCertificate,
  memberStatus,
  needsDefrag,
  peerUrl,
  quotaFor,
  runEtcdMember,
  upkeepRunnable,
  type EtcdMemberOptions,
  type EtcdTls,
} from "./mod.ts";

const running: Supervisor[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.stop()));
});

/** Loopback addresses and ports unique to this test process. */
const HOST = "127.0.0.1";
/** Ports for a member whose arguments are only looked at. */
const UNUSED_PORTS = { peer: 2380, client: 2379 };

function memberTls(): EtcdTls {
  const caKey = generateKeyPair();
  const ca = { certificate: createEtcdCA(caKey), privateKey: caKey.privateKey };
  const key = generateKeyPair();
  return { ca: ca.certificate, certificate: issueMemberCertificate(ca, key.publicKey, { name: "node-a", addresses: [HOST] }), privateKey: key.privateKey };
}

/** A one-member cluster on loopback, on the given ports. */
function singleMember(dataDir: string, tlsDir: string, tls: EtcdTls, ports: { peer: number; client: number } = UNUSED_PORTS): EtcdMemberOptions {
  return {
    binary: treeEtcd(),
    name: "node-a",
    dataDir,
    tlsDir,
    peerHost: HOST,
    clientHost: HOST,
    peerPort: ports.peer,
    clientPort: ports.client,
    tls,
    clusterState: "new",
    initialCluster: [{ name: "node-a", peerUrl: peerUrl(HOST, ports.peer) }],
  };
}

/**
 * A single member run by a supervisor that restarts it quickly, once it
 * serves: the supervisor, its log entries, and the runnable's state as `etcd()`.
 */
async function supervisedMember(dataDir: string, tlsDir: string, tls: EtcdTls, extra: Partial<EtcdMemberOptions> = {}) {
  // Ports the system says are free: fixed ones can be any other socket's
  // (a client's ephemeral port among them), and etcd then never starts.
  const ports = { peer: await freePort(HOST), client: await freePort(HOST) };
  const { logger, entries } = captureLogger("root");
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("etcd", (c) => runEtcdMember(c, { ...singleMember(dataDir, tlsDir, tls, ports), ...extra }));
      await untilCancelled(ctx.signal);
    },
    { logger, backoff: { initialMs: 50, multiplier: 1.5, maxMs: 1000, jitter: 0 } },
  );
  running.push(supervisor);
  const etcd = () => supervisor.dump().find((d) => d.path === "root.etcd")!;
  await eventually(() => expect(etcd().state).toBe("healthy"), { timeoutMs: 30_000 });
  return { supervisor, entries, etcd, url: clientUrl(HOST, ports.client), peer: peerUrl(HOST, ports.peer) };
}

describe("etcd member", () => {
  test("serves over mutual TLS, and after SIGKILL the supervisor restarts it with every acknowledged write", async () => {
    using dir = tempDir("nodecore-etcd-");
    const tls = memberTls();
    const pids: number[] = [];
    const { entries, etcd, url } = await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls);

    const client = await connectEtcd({ endpoints: [url], tls });
    for (let i = 0; i < 50; i++) await client.put(`key-${i}`).value(`value-${i}`);

    for (const e of entries) if (e.message === "process started") pids.push(Number(e.fields.pid));
    expect(pids.length).toBe(1);
    process.kill(pids[0]!, "SIGKILL");
    await eventually(() => expect(etcd().restarts).toBe(1), { timeoutMs: 30_000 });
    expect(etcd().lastError).toBe(`${treeEtcd()} was killed by SIGKILL`);
    await eventually(() => expect(etcd().state).toBe("healthy"), { timeoutMs: 30_000 });

    const all = await client.getAll().prefix("key-").strings();
    expect(Object.keys(all).length).toBe(50);
    expect(all["key-49"]).toBe("value-49");
    client.close();
  }, 90_000);

  test("restarted alone, it finds a snapshot and elects itself without waiting out an election timeout (etcd's log says which)", async () => {
    using dir = tempDir("nodecore-etcd-");
    const tls = memberTls();
    const { entries, etcd, url } = await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls);
    const client = await connectEtcd({ endpoints: [url], tls });
    for (let i = 0; i < 10; i++) await client.put(`key-${i}`).value(`value-${i}`);
    client.close();

    const started = entries.filter((e) => e.message === "process started");
    process.kill(Number(started[0]!.fields.pid), "SIGKILL");
    await eventually(() => expect(etcd().restarts).toBe(1), { timeoutMs: 30_000 });
    await eventually(() => expect(etcd().state).toBe("healthy"), { timeoutMs: 30_000 });
    // Without a snapshot etcd 3.4 would say "starting initial election tick advance" and wait.
    const restart = entries.findLastIndex((e) => e.message === "process started");
    const afterRestart = entries.slice(restart).map((e) => e.message);
    expect(afterRestart).toContain("started as single-node; fast-forwarding election ticks");
  }, 90_000);

  test("a member that joins serves without waiting out etcd's request timeout, its publish overtaken by the leader's snapshot or not", async () => {
    using dir = tempDir("nodecore-etcd-join-");
    const caKey = generateKeyPair();
    const ca = { certificate: createEtcdCA(caKey), privateKey: caKey.privateKey };
    const tlsOf = (name: string): EtcdTls => {
      const key = generateKeyPair();
      return { ca: ca.certificate, certificate: issueMemberCertificate(ca, key.publicKey, { name, addresses: [HOST] }), privateKey: key.privateKey };
    };
    const tlsA = tlsOf("node-a");
    const a = await supervisedMember(join(dir.path, "a"), join(dir.path, "a-tls"), tlsA);
    const client = await connectEtcd({ endpoints: [a.url], tls: tlsA });
    for (let i = 0; i < 100; i++) await client.put(`key-${i}`).value(`value-${i}`);
    const ports = { peer: await freePort(HOST), client: await freePort(HOST) };
    const bPeer = peerUrl(HOST, ports.peer);
    await client.cluster.memberAdd({ peerURLs: [bPeer], isLearner: true });

    const { logger, entries } = captureLogger("root");
    const tlsB = tlsOf("node-b");
    const b: EtcdMemberOptions = {
      ...singleMember(join(dir.path, "b"), join(dir.path, "b-tls"), tlsB, ports),
      name: "node-b",
      clusterState: "existing",
      initialCluster: [
        { name: "node-a", peerUrl: a.peer },
        { name: "node-b", peerUrl: bPeer },
      ],
    };
    // No grace: a member not published by the time its snapshot is applied runs again.
    const supervisor = supervise(
      async (ctx) => {
        ctx.run("etcd", (c) => runEtcdMember(c, b, 0));
        await untilCancelled(ctx.signal);
      },
      { logger },
    );
    running.push(supervisor);
    // A learner answers no read: promoted once it caught up, as the curator does.
    await eventually(
      async () => {
        const learner = (await client.cluster.memberList({})).members.find((m) => m.peerURLs.includes(bPeer));
        if (learner?.isLearner) await client.cluster.memberPromote({ ID: learner.ID });
        expect(supervisor.dump().find((d) => d.path === "root.etcd")!.state).toBe("healthy");
      },
      { timeoutMs: 30_000 },
    );
    const messages = entries.map((e) => e.message);
    // etcd's own retry after its request timeout: what the rerun avoids.
    expect(messages).not.toContain("failed to publish local member to cluster through raft");
    expect(messages).toContain("applied snapshot");
    const reran = messages.includes("etcd applied the leader's snapshot without publishing itself, its publish overtaken by the snapshot: running it again from the snapshot on disk");
    expect(messages.filter((m) => m === "process started").length).toBe(reran ? 2 : 1);
    expect(supervisor.dump().find((d) => d.path === "root.etcd")!.restarts).toBe(0);
    const fromB = await connectEtcd({ endpoints: [clientUrl(HOST, ports.client)], tls: tlsB });
    expect(await fromB.get("key-99").string()).toBe("value-99");
    fromB.close();
    client.close();
    // Stopped here, not after the test: the two voters' stops take longer than a hook may.
    running.splice(running.indexOf(supervisor), 1);
    await supervisor.stop();
    running.splice(running.indexOf(a.supervisor), 1);
    await a.supervisor.stop();
  }, 90_000);

  test("refuses a client whose certificate is not under the etcd CA", async () => {
    using dir = tempDir("nodecore-etcd-");
    const tls = memberTls();
    const { url } = await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls);
    const stranger = memberTls();
    const client = await connectEtcd({ endpoints: [url], tls: { ...stranger, ca: tls.ca } });
    await expect(client.get("x").string()).rejects.toThrow();
    client.close();
  }, 60_000);
});

/** A small file system of its own (tmpfs) to fill up: needs root to mount. */
const CAN_MOUNT = process.getuid?.() === 0;

describe.skipIf(!CAN_MOUNT)("etcd member on a data partition that fills up", () => {
  test("dies at its next commit, is reported as a full partition, waits for space instead of crash-looping, and comes back with its data", async () => {
    using dir = tempDir("nodecore-etcd-full-");
    const dataRoot = join(dir.path, "data-partition");
    await runCommand(["mkdir", "-p", dataRoot]);
    await runCommand(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", dataRoot]);
    try {
      const tls = memberTls();
      const { supervisor, entries, etcd, url } = await supervisedMember(join(dataRoot, "etcd"), join(dir.path, "tls"), tls);
      const client = await connectEtcd({ endpoints: [url], tls });
      const acknowledged: string[] = [];
      for (let i = 0; i < 20; i++) {
        await client.put(`key-${i}`).value(`value-${i}`);
        acknowledged.push(`key-${i}`);
      }

      // Fill the partition, then write until etcd cannot commit and dies.
      const fills = await fillFileSystem(dataRoot);
      const big = "x".repeat(4096);
      for (let i = 0; i < 2000 && etcd().restarts === 0; i++) {
        try {
          await client.put(`filler-${i}`).value(big);
        } catch {
          await Bun.sleep(100);
        }
      }
      await eventually(() => expect(etcd().restarts).toBe(1), { timeoutMs: 30_000 });
      expect(etcd().lastError).toContain("the data partition is full (");
      // Started again, it waits for space: one clear line, and no etcd.
      const FULL = "data partition full: etcd waits for space before it starts";
      const ROOM = "data partition has room again: starting etcd";
      await eventually(() => expect(entries.some((e) => e.message === FULL)).toBe(true), { timeoutMs: 10_000 });
      expect(etcd().state).toBe("starting");

      for (const file of fills) rmSync(file);
      expect(freeSpace(dataRoot).freeBytes).toBeGreaterThanOrEqual(ETCD_MIN_FREE_BYTES);
      await eventually(() => expect(etcd().state).toBe("healthy"), { timeoutMs: 30_000 });
      // What proves there was no crash loop needs no waiting: a crash loop
      // starts etcd, and a waiter that gave up dies. Between the one "full"
      // line and the "room again" line, no etcd started; the death count is
      // still the one the full partition caused, now that it serves again.
      const messages = entries.map((e) => e.message);
      expect(messages.filter((m) => m === FULL).length).toBe(1);
      expect(messages.indexOf(ROOM)).toBeGreaterThan(messages.indexOf(FULL));
      const waited = messages.slice(messages.indexOf(FULL), messages.indexOf(ROOM));
      expect(waited.filter((m) => m === "starting etcd" || m === "process started")).toEqual([]);
      expect(etcd().restarts).toBe(1);
      const all = await client.getAll().prefix("key-").strings();
      for (const key of acknowledged) expect(all[key]).toBe(key.replace("key-", "value-"));
      client.close();
      await supervisor.stop();
    } finally {
      await runCommand(["umount", "-l", dataRoot]).catch(() => {});
    }
  }, 120_000);
});

describe("etcd's raft timing", () => {
  const files = { ca: "/tls/ca.pem", cert: "/tls/member.pem", key: "/tls/member.key" };
  const timing = (options: EtcdMemberOptions) => etcdArgs(options, files).filter((a) => a.startsWith("--heartbeat-interval=") || a.startsWith("--election-timeout="));
  const alone = singleMember("/data/etcd", "/tls", memberTls());

  test("a member that expects to be alone elects itself quickly; one of several keeps the slower timing", () => {
    expect(timing(alone)).toEqual(["--heartbeat-interval=100", "--election-timeout=1000"]);
    const joining = { ...alone, clusterState: "existing" as const, initialCluster: [...alone.initialCluster, { name: "node-b", peerUrl: peerUrl("127.0.0.2") }] };
    expect(timing(joining)).toEqual(["--heartbeat-interval=250", "--election-timeout=2500"]);
  });

  test("the member count the node last saw wins over the cluster it started with", () => {
    // The first node started alone, and the cluster grew to three since.
    expect(timing({ ...alone, expectedMembers: 3 })).toEqual(["--heartbeat-interval=250", "--election-timeout=2500"]);
    expect(timing({ ...alone, expectedMembers: 1 })).toEqual(["--heartbeat-interval=100", "--election-timeout=1000"]);
  });
});

describe("etcd log lines", () => {
  test("keep etcd's level, message and fields", async () => {
    const { parseEtcdLine } = await import("./mod.ts");
    const parsed = parseEtcdLine('{"level":"warn","ts":"2026-01-01T00:00:00Z","caller":"x.go:1","msg":"slow fdatasync","took":"1.2s"}');
    expect(parsed).toEqual({ level: "warn", message: "slow fdatasync", fields: { took: "1.2s" } });
    expect(parseEtcdLine("WARNING: plain text")).toBeUndefined();
  });
});

describe("etcd upkeep", () => {
  test("the quota is a quarter of the data partition, within 64 MiB and 8 GiB; a file is defragmented when mostly free pages, and worth it", () => {
    expect(quotaFor(1024 ** 3)).toBe(256 * 1024 ** 2);
    expect(quotaFor(100 * 1024 ** 2)).toBe(64 * 1024 ** 2);
    expect(quotaFor(1024 ** 4)).toBe(8 * 1024 ** 3);
    expect(needsDefrag({ dbSizeBytes: 100 * 1024 ** 2, dbSizeInUseBytes: 40 * 1024 ** 2 })).toBe(true);
    expect(needsDefrag({ dbSizeBytes: 100 * 1024 ** 2, dbSizeInUseBytes: 60 * 1024 ** 2 })).toBe(false);
    expect(needsDefrag({ dbSizeBytes: 40 * 1024 ** 2, dbSizeInUseBytes: 1024 ** 2 })).toBe(true);
    expect(needsDefrag({ dbSizeBytes: 20 * 1024 ** 2, dbSizeInUseBytes: 1024 })).toBe(false);
  });

  test("the flags compact history by etcd itself and bound the database", () => {
    const files = { ca: "/tls/ca.pem", cert: "/tls/member.pem", key: "/tls/member.key" };
    const args = etcdArgs({ ...singleMember("/data/etcd", "/tls", memberTls()), quotaBytes: 256 * 1024 ** 2 }, files);
    expect(args).toContain("--auto-compaction-mode=periodic");
    expect(args).toContain("--auto-compaction-retention=1h");
    expect(args).toContain(`--quota-backend-bytes=${256 * 1024 ** 2}`);
    expect(args).not.toContain("--force-new-cluster");
    expect(etcdArgs({ ...singleMember("/data/etcd", "/tls", memberTls()), forceNewCluster: true }, files)).toContain("--force-new-cluster");
  });

  test("a member whose history filled its quota (NOSPACE, writes refused) is walked back by the upkeep: compacted, defragmented, the alarm disarmed, writes taken again, and its line says so", async () => {
    using dir = tempDir("nodecore-etcd-");
    const tls = memberTls();
    const quota = 8 * 1024 * 1024;
    const { url } = await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls, { quotaBytes: quota });
    const client = await connectEtcd({ endpoints: [url], tls });
    // One key written over and over: every old value stays in the history until compaction.
    const value = "x".repeat(256 * 1024);
    let refused = "";
    let lastWritten = -1;
    for (let i = 0; i < 200 && !refused; i++) {
      try {
        await client.put("nodecore/big").value(`${i}:${value}`);
        lastWritten = i;
      } catch (err) {
        refused = (err as Error).message;
      }
    }
    expect(refused).toMatch(/database space exceeded/);
    const full = await memberStatus(client);
    expect(full.alarms).toEqual([`NOSPACE on ${full.memberId}`]);
    expect(describeMember(full)).toContain(`alarms: NOSPACE on ${full.memberId}`);

    const lines: { state: string; message: string }[] = [];
    const { logger, entries: upkeepLog } = captureLogger("root");
    const upkeep = supervise(upkeepRunnable({ client: async () => client, quotaBytes: quota, report: (state, message) => lines.push({ state, message }), intervalMs: 200 }), { logger });
    running.push(upkeep);
    await eventually(() => expect(lines.at(-1)?.state).toBe("running"), { timeoutMs: 10_000 }).catch((err) => {
      throw new Error(`${(err as Error).message}; lines: ${JSON.stringify(lines.slice(-2))}; log: ${JSON.stringify(upkeepLog.slice(-4).map((e) => [e.message, e.fields]))}`);
    });
    const after = await memberStatus(client);
    expect(after.alarms).toEqual([]);
    expect(after.dbSizeBytes).toBeLessThan(full.dbSizeBytes / 2);
    expect(lines.at(-1)!.message).toMatch(/^member [0-9a-f]+ \(leader\), .* on disk, .* in use, revision \d+, quota 8\.0 MiB$/);
    // Writes are taken again, and the key kept its last value: the last one
    // acknowledged, or the refused one after it (etcd applies the write that
    // crosses the quota, then answers NOSPACE).
    await client.put("nodecore/after").value("ok");
    expect([String(lastWritten), String(lastWritten + 1)]).toContain((await client.get("nodecore/big").string())?.split(":")[0] ?? "none");
    expect(await client.get("nodecore/after").string()).toBe("ok");
    client.close();
  }, 90_000);
});
