// A real etcd member (Debian's etcd binary) on loopback with mutual TLS.

import { afterEach, describe, expect, test } from "bun:test";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { freeSpace } from "../localstorage/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { runCommand, supervise, untilCancelled, type Supervisor } from "../supervisor/mod.ts";
import { eventually, fillFileSystem, tempDir, treeEtcd } from "../testing/mod.ts";
import { clientUrl, connectEtcd, createEtcdCA, ETCD_MIN_FREE_BYTES, etcdArgs, issueMemberCertificate, peerUrl, runEtcdMember, type EtcdMemberOptions, type EtcdTls } from "./mod.ts";

const running: Supervisor[] = [];
afterEach(async () => {
  await Promise.all(running.splice(0).map((s) => s.stop()));
});

/** Loopback addresses and ports unique to this test process. */
const HOST = "127.0.0.1";
const PEER_PORT = 20_000 + (process.pid % 10_000);
const CLIENT_PORT = PEER_PORT + 10_000 > 65_000 ? PEER_PORT - 5_000 : PEER_PORT + 10_000;

function memberTls(): EtcdTls {
  const caKey = generateKeyPair();
  const ca = { certificate: createEtcdCA(caKey), privateKey: caKey.privateKey };
  const key = generateKeyPair();
  return { ca: ca.certificate, certificate: issueMemberCertificate(ca, key.publicKey, { name: "node-a", addresses: [HOST] }), privateKey: key.privateKey };
}

/** A one-member cluster on loopback; `offset` keeps each test's ports apart. */
function singleMember(dataDir: string, tlsDir: string, tls: EtcdTls, offset: number): EtcdMemberOptions {
  return {
    binary: treeEtcd(),
    name: "node-a",
    dataDir,
    tlsDir,
    peerHost: HOST,
    clientHost: HOST,
    peerPort: PEER_PORT + offset,
    clientPort: CLIENT_PORT + offset,
    tls,
    clusterState: "new",
    initialCluster: [{ name: "node-a", peerUrl: peerUrl(HOST, PEER_PORT + offset) }],
  };
}

/**
 * A single member run by a supervisor that restarts it quickly, once it
 * serves: the supervisor, its log entries, and the runnable's state as `etcd()`.
 */
async function supervisedMember(dataDir: string, tlsDir: string, tls: EtcdTls, offset: number) {
  const { logger, entries } = captureLogger("root");
  const supervisor = supervise(
    async (ctx) => {
      ctx.run("etcd", (c) => runEtcdMember(c, singleMember(dataDir, tlsDir, tls, offset)));
      await untilCancelled(ctx.signal);
    },
    { logger, backoff: { initialMs: 50, multiplier: 1.5, maxMs: 1000, jitter: 0 } },
  );
  running.push(supervisor);
  const etcd = () => supervisor.dump().find((d) => d.path === "root.etcd")!;
  await eventually(() => expect(etcd().state).toBe("healthy"), { timeoutMs: 30_000 });
  return { supervisor, entries, etcd };
}

describe("etcd member", () => {
  test("serves over mutual TLS, and after SIGKILL the supervisor restarts it with every acknowledged write", async () => {
    using dir = tempDir("nodecore-etcd-");
    const tls = memberTls();
    const pids: number[] = [];
    const { entries, etcd } = await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls, 0);

    const client = await connectEtcd({ endpoints: [clientUrl(HOST, CLIENT_PORT)], tls });
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
    const { entries, etcd } = await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls, 3);
    const client = await connectEtcd({ endpoints: [clientUrl(HOST, CLIENT_PORT + 3)], tls });
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

  test("refuses a client whose certificate is not under the etcd CA", async () => {
    using dir = tempDir("nodecore-etcd-");
    const tls = memberTls();
    await supervisedMember(join(dir.path, "data"), join(dir.path, "tls"), tls, 1);
    const stranger = memberTls();
    const client = await connectEtcd({ endpoints: [clientUrl(HOST, CLIENT_PORT + 1)], tls: { ...stranger, ca: tls.ca } });
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
      const { supervisor, entries, etcd } = await supervisedMember(join(dataRoot, "etcd"), join(dir.path, "tls"), tls, 2);
      const client = await connectEtcd({ endpoints: [clientUrl(HOST, CLIENT_PORT + 2)], tls });
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
      // Started again, it waits for space: no second death, one clear line.
      await eventually(() => expect(entries.some((e) => e.message === "data partition full: etcd waits for space before it starts")).toBe(true), { timeoutMs: 10_000 });
      await Bun.sleep(3_000);
      expect(etcd().restarts).toBe(1);
      expect(etcd().state).toBe("starting");
      expect(entries.filter((e) => e.message === "data partition full: etcd waits for space before it starts").length).toBe(1);

      for (const file of fills) rmSync(file);
      expect(freeSpace(dataRoot).freeBytes).toBeGreaterThanOrEqual(ETCD_MIN_FREE_BYTES);
      await eventually(() => expect(etcd().state).toBe("healthy"), { timeoutMs: 30_000 });
      expect(entries.some((e) => e.message === "data partition has room again: starting etcd")).toBe(true);
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
  const alone = singleMember("/data/etcd", "/tls", memberTls(), 0);

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
