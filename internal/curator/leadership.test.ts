// The curator leader's renew deadline, over real etcd: a leader whose etcd
// stops answering (its connection stalled, as a starved node's is) ends its
// term itself once a whole TTL has passed without a renewal, instead of
// calling itself leader until etcd3 gives up two TTLs later; a stall shorter
// than the TTL costs it nothing.

import { afterAll, beforeAll, expect, test } from "bun:test";
import net from "node:net";
import { Campaign, type Etcd3 } from "etcd3";
import { clientUrl, connectEtcd, issueEtcdClientCertificate } from "../consensus/mod.ts";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { supervise, type Supervisor } from "../supervisor/mod.ts";
import { eventually } from "../testing/mod.ts";
import { LEADER_LEASE_TTL_S, leadershipRunnable, type Leadership } from "./leadership.ts";
import { ETCD_PREFIX } from "./store.ts";
import { startTestCluster, type TestCluster } from "./test_cluster.ts";

/**
 * A TCP relay to etcd that can be stalled: while stalled it reads nothing
 * from either side (and new connections wait), so bytes queue as they do
 * behind a process that is not scheduled, and flow again on thaw.
 */
class StallableRelay {
  private stalled = false;
  private readonly sockets = new Set<net.Socket>();
  readonly server: net.Server;

  constructor(target: { host: string; port: number }) {
    this.server = net.createServer((downstream) => {
      const upstream = net.connect(target.port, target.host);
      for (const [from, to] of [
        [downstream, upstream],
        [upstream, downstream],
      ] as const) {
        this.sockets.add(from);
        from.pipe(to);
        from.on("error", () => to.destroy());
        from.on("close", () => {
          this.sockets.delete(from);
          to.destroy();
        });
        if (this.stalled) from.pause();
      }
    });
  }

  async listen(): Promise<number> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    return (this.server.address() as net.AddressInfo).port;
  }

  stall(): void {
    this.stalled = true;
    for (const socket of this.sockets) socket.pause();
  }

  thaw(): void {
    this.stalled = false;
    for (const socket of this.sockets) socket.resume();
  }

  close(): void {
    for (const socket of this.sockets) socket.destroy();
    this.server.close();
  }
}

let cluster: TestCluster;
let relay: StallableRelay;
let etcd: Etcd3;
let leading: Supervisor;
const state = new Value<Leadership>();
const { logger, entries } = captureLogger("leadership");
const self = { nodeId: "node-00000000000000aa", address: "127.0.0.1:1" };

beforeAll(async () => {
  cluster = await startTestCluster();
  // The test cluster's own curator steps aside (it resigns): the campaign
  // under test leads, through the relay.
  await cluster.stopCurator(cluster.curatorPort);
  const url = new URL(cluster.etcdUrl);
  relay = new StallableRelay({ host: url.hostname, port: Number(url.port) });
  const port = await relay.listen();
  const key = generateKeyPair();
  etcd = await connectEtcd({
    endpoints: [clientUrl("127.0.0.1", port)],
    tls: { ca: cluster.etcdCA.certificate, certificate: issueEtcdClientCertificate(cluster.etcdCA, key.publicKey, "leadership-test"), privateKey: key.privateKey },
  });
  leading = supervise(leadershipRunnable(etcd.namespace(ETCD_PREFIX), self, state), { logger, backoff: { initialMs: 200, multiplier: 1.5, maxMs: 1_000, jitter: 0.2 } });
  await eventually(() => expect(state.peek()?.isLeader).toBe(true), { timeoutMs: 30_000, what: "the campaign under test leading" });
}, 120_000);

afterAll(async () => {
  relay?.thaw();
  await leading?.stop();
  etcd?.close();
  relay?.close();
  await cluster?.close();
});

/** Every value the leadership takes from now on. */
function record(): { seen: Leadership[]; stop: () => void } {
  const seen: Leadership[] = [];
  const watcher = state.watch();
  const abort = new AbortController();
  void (async () => {
    try {
      for (;;) seen.push(await watcher.get({ signal: abort.signal }));
    } catch {
      // stopped
    }
  })();
  return { seen, stop: () => (abort.abort(), watcher[Symbol.dispose]()) };
}

test("a stall shorter than the lease's TTL keeps the term: the same fence, never a moment without leading", async () => {
  const fence = state.peek()!.fenceKey;
  expect(fence).toBeDefined();
  const values = record();
  relay.stall();
  await Bun.sleep(5_000);
  relay.thaw();
  // A renewal goes through again (etcd3 renews every TTL/3).
  await Bun.sleep((LEADER_LEASE_TTL_S * 1000) / 3 + 1_000);
  values.stop();
  expect(values.seen.filter((l) => !l.isLeader)).toEqual([]);
  expect(state.peek()).toMatchObject({ isLeader: true, fenceKey: fence });
}, 60_000);

test("a leader whose lease goes unrenewed for a TTL stops calling itself leader then, not two TTLs later; it leads again once etcd answers", async () => {
  const from = entries.length;
  relay.stall();
  const stalledAt = performance.now();
  await eventually(() => expect(state.peek()?.isLeader).toBe(false), { timeoutMs: 2 * LEADER_LEASE_TTL_S * 1000 + 10_000, intervalMs: 100, what: "the leader stepping down" });
  const afterMs = performance.now() - stalledAt;
  // The last renewal came at most TTL/3 before the stall; the check runs every second.
  expect(afterMs).toBeLessThan(LEADER_LEASE_TTL_S * 1000 + 3_000);
  expect(afterMs).toBeGreaterThan((LEADER_LEASE_TTL_S * 1000 * 2) / 3 - 1_000);
  relay.thaw();
  // The runnable's end is logged once its resignation settles (through etcd, answering again).
  await eventually(
    () => expect(entries.slice(from).some((e) => new RegExp(`^the curator lease was not renewed for \\d+ s \\(its TTL is ${LEADER_LEASE_TTL_S} s\\)`).test(String(e.fields.error ?? "")))).toBe(true),
    {
      timeoutMs: 30_000,
      what: "the step-down's reason in the log",
    },
  );
  await eventually(() => expect(state.peek()?.isLeader).toBe(true), { timeoutMs: 60_000, what: "leading again" });
}, 120_000);

test("a campaign whose key leads but which never says elected (its wait for the keys ahead of it lost) is taken for wedged: it resigns, campaigns again and leads", async () => {
  await leading.stop();
  await eventually(() => expect(state.peek()?.isLeader).toBe(false), { timeoutMs: 30_000, what: "the first campaign resigned" });
  // etcd3's campaign waits for the keys ahead of it, then says "elected";
  // the first wait of the next campaign never ends, as a watch that missed
  // its delete event never does.
  const proto = Campaign.prototype as unknown as { waitForElected: (revision: string) => Promise<void> };
  const original = proto.waitForElected;
  let wedges = 1;
  proto.waitForElected = function (this: unknown, revision: string) {
    if (wedges-- > 0) return new Promise<void>(() => {});
    return original.call(this, revision);
  };
  const from = entries.length;
  const wedgedState = new Value<Leadership>();
  const again = supervise(leadershipRunnable(etcd.namespace(ETCD_PREFIX), self, wedgedState, { campaignWedgedMs: 2_000 }), {
    logger,
    backoff: { initialMs: 200, multiplier: 1.5, maxMs: 1_000, jitter: 0.2 },
  });
  try {
    // Meanwhile it names no leader (its own key leads, unelected): nobody takes writes.
    await eventually(() => expect(wedgedState.peek()).toEqual({ isLeader: false }), { timeoutMs: 20_000, what: "the wedged campaign published" });
    await eventually(() => expect(entries.slice(from).some((e) => /campaign has led the curator election for \d+ s without being elected/.test(String(e.fields.error ?? "")))).toBe(true), {
      timeoutMs: 30_000,
      what: "the wedge named in the log",
    });
    await eventually(() => expect(wedgedState.peek()?.isLeader).toBe(true), { timeoutMs: 30_000, what: "leading after campaigning again" });
    expect(wedges).toBeLessThan(0);
  } finally {
    proto.waitForElected = original;
    await again.stop();
  }
}, 120_000);
