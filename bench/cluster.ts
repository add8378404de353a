// Figures for the cluster: bootstrap time of a node process, curator unary
// latency (direct, and through the curator pool) and read throughput on
// loopback against a raw etcd get in the same run, Watch fan-out to 1000 and
// 2000 watchers (time and the memory of the process serving them: before,
// during, after), and the time for three node processes to form a cluster of
// three voting etcd members. Prints figures; asserts nothing.
//
//   bun bench/cluster.ts                  everything
//   bun bench/cluster.ts --curator-only   the curator's figures, not the node processes'
//
// The curator, its clients and etcd's client all run in this process; etcd
// runs in its own. Read throughput alternates one-second rounds of curator
// reads and raw etcd gets (THROUGHPUT_ROUNDS of each), so that whatever else
// the machine does weighs on both alike.

import { Management } from "../proto/gen/api/management_pb.ts";
import { Curator, WatchEvent_Progress } from "../proto/gen/curator/curator_pb.ts";
import { AAA } from "../proto/gen/api/management_pb.ts";
import { startTestCluster } from "../internal/curator/test_cluster.ts";
import { CuratorPool } from "../internal/curator/client/mod.ts";
import { figure, ms, percentile } from "./figures.ts";
import { eventually, tempDir } from "../internal/testing/mod.ts";
import { X509Certificate } from "node:crypto";
import { formProcessCluster } from "../test/support/process_cluster.ts";
import { benchArgs } from "./args.ts";

const { values } = benchArgs({ "curator-only": { type: "boolean", help: "the curator's figures, not the node processes'" } });

const LATENCY_CALLS = 500;
const THROUGHPUT_ROUNDS = 5;
const THROUGHPUT_ROUND_MS = 1000;
const THROUGHPUT_CONCURRENCY = 32;
/** Fan-out is measured at each of these numbers of watchers, adding watchers between steps. */
const WATCHER_STEPS = [1000, 2000];
const WATCHERS_PER_CLIENT = 100;

async function curatorFigures(): Promise<void> {
  const cluster = await startTestCluster();
  try {
    const aaa = cluster.client(AAA, { kind: "self-signed", key: cluster.ownerKey });
    const escrow = await aaa.escrow({});
    aaa.close();
    const owner = { kind: "owner" as const, certificate: new X509Certificate(escrow.ownerCertificate), privateKey: cluster.ownerKey.privateKey };
    const management = cluster.client(Management, owner);
    const curator = cluster.client(Curator, { kind: "node", certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey });
    await management.getClusterInfo({});

    const reads: number[] = [];
    for (let i = 0; i < LATENCY_CALLS; i++) {
      const started = performance.now();
      await management.getClusterInfo({});
      reads.push(performance.now() - started);
    }
    figure(`curator read (GetClusterInfo) p50 / p99, ${LATENCY_CALLS} calls`, `${ms(percentile(reads, 50))} / ${ms(percentile(reads, 99))}`);
    const writes: number[] = [];
    for (let i = 0; i < LATENCY_CALLS; i++) {
      const started = performance.now();
      await curator.updateNodeStatus({ nodeId: cluster.node.id, status: { externalAddress: cluster.host, timestampMs: BigInt(Date.now()) } });
      writes.push(performance.now() - started);
    }
    figure(`curator write (UpdateNodeStatus) p50 / p99, ${LATENCY_CALLS} calls`, `${ms(percentile(writes, 50))} / ${ms(percentile(writes, 99))}`);

    // The same calls through the curator pool every caller uses (leader
    // first, clients kept open), with a second, following curator listed first.
    const follower = await cluster.addCurator(cluster.curatorPort + 100);
    await follower.leadership.waitFor((l) => l.leader?.nodeId === cluster.node.id);
    const ownerPool = new CuratorPool({ ca: cluster.clusterCA.certificate, certificate: owner.certificate, privateKey: owner.privateKey });
    const nodePool = new CuratorPool({ ca: cluster.clusterCA.certificate, certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey });
    const endpoints = [follower.endpoint, cluster.endpoint];
    try {
      const poolReads: number[] = [];
      const poolWrites: number[] = [];
      for (let i = 0; i < LATENCY_CALLS; i++) {
        let started = performance.now();
        await ownerPool.call(Management, endpoints, (m) => m.getClusterInfo({}));
        poolReads.push(performance.now() - started);
        started = performance.now();
        await nodePool.call(Curator, endpoints, (c) => c.updateNodeStatus({ nodeId: cluster.node.id, status: { externalAddress: cluster.host, timestampMs: BigInt(Date.now()) } }));
        poolWrites.push(performance.now() - started);
      }
      figure(`through the pool: read p50 / p99, ${LATENCY_CALLS} calls`, `${ms(percentile(poolReads, 50))} / ${ms(percentile(poolReads, 99))}`);
      figure(`through the pool: write p50 / p99, ${LATENCY_CALLS} calls`, `${ms(percentile(poolWrites, 50))} / ${ms(percentile(poolWrites, 99))}`);
    } finally {
      ownerPool.close();
      nodePool.close();
      await cluster.stopCurator(cluster.curatorPort + 100);
    }

    // Read throughput: curator reads against raw etcd gets of one key, in
    // alternating rounds at the same concurrency.
    const callsPerSecond = async (call: () => Promise<unknown>): Promise<number> => {
      let count = 0;
      const started = performance.now();
      const deadline = started + THROUGHPUT_ROUND_MS;
      await Promise.all(
        Array.from({ length: THROUGHPUT_CONCURRENCY }, async () => {
          while (performance.now() < deadline) {
            await call();
            count++;
          }
        }),
      );
      return count / ((performance.now() - started) / 1000);
    };
    const curatorRounds: number[] = [];
    const etcdRounds: number[] = [];
    for (let round = 0; round < THROUGHPUT_ROUNDS; round++) {
      curatorRounds.push(await callsPerSecond(() => management.getClusterInfo({})));
      etcdRounds.push(await callsPerSecond(() => cluster.etcd.get("/nodecore/cluster").buffer()));
    }
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const rounds = (xs: number[]) => `${Math.round(mean(xs))} calls/s (rounds ${Math.round(Math.min(...xs))}–${Math.round(Math.max(...xs))})`;
    figure(`curator read throughput, ${THROUGHPUT_CONCURRENCY} concurrent`, rounds(curatorRounds));
    figure(`raw etcd get throughput, ${THROUGHPUT_CONCURRENCY} concurrent, same run`, rounds(etcdRounds));
    figure("curator read / raw etcd get", `${(mean(curatorRounds) / mean(etcdRounds)).toFixed(2)}`);

    // Watch fan-out: watchers over several channels, then one write; more
    // watchers, then another write. The curator runs in this process, so
    // its memory is this process's.
    const rss = () => {
      Bun.gc(true);
      return `${Math.round(process.memoryUsage().rss / 1024 / 1024)} MiB`;
    };
    const rssBefore = rss();
    const controller = new AbortController();
    const clients: ReturnType<typeof cluster.client<typeof Curator>>[] = [];
    const streams: Promise<void>[] = [];
    let backlogged = 0;
    /** Marker (a status version) → when each watcher saw it. */
    const seenAt = new Map<string, number[]>();
    const watch = (client: (typeof clients)[number]) => async () => {
      try {
        for await (const event of client.watch({ kind: { case: "nodesInCluster", value: {} } }, { signal: controller.signal })) {
          if (event.progress === WatchEvent_Progress.LAST_BACKLOGGED) backlogged++;
          for (const node of event.nodes) seenAt.get(node.status?.version ?? "")?.push(performance.now());
        }
      } catch {
        // Cancelled at the end.
      }
    };
    let rssDuring = "";
    for (const watchers of WATCHER_STEPS) {
      const setupStarted = performance.now();
      while (clients.length * WATCHERS_PER_CLIENT < watchers) {
        const client = cluster.client(Curator, { kind: "node", certificate: cluster.node.certificate, privateKey: cluster.node.key.privateKey });
        clients.push(client);
        for (let i = 0; i < WATCHERS_PER_CLIENT; i++) streams.push(watch(client)());
      }
      await eventually(() => backlogged === watchers, { timeoutMs: 120_000, what: `all ${watchers} watchers past their backlog` });
      figure(`watch: ${watchers} watchers established`, ms(performance.now() - setupStarted));
      const marker = `fanout-${watchers}-${Date.now()}`;
      const seen: number[] = [];
      seenAt.set(marker, seen);
      const written = performance.now();
      await curator.updateNodeStatus({ nodeId: cluster.node.id, status: { externalAddress: cluster.host, version: marker, timestampMs: BigInt(Date.now()) } });
      await eventually(() => seen.length === watchers, { timeoutMs: 120_000, what: "update reached every watcher" });
      figure(
        `watch: one update reaches all ${watchers} watchers`,
        `${ms(Math.max(...seen) - written)} (median ${ms(
          percentile(
            seen.map((t) => t - written),
            50,
          ),
        )})`,
      );
      rssDuring = rss();
    }
    const most = WATCHER_STEPS.at(-1)!;
    controller.abort();
    await Promise.all(streams);
    await new Promise((resolve) => setTimeout(resolve, 2000));
    figure(`watch: RSS before / with ${most} watchers / after they end`, `${rssBefore} / ${rssDuring} / ${rss()}`);
    for (const c of [...clients, management, curator]) c.close();
  } finally {
    await cluster.close();
  }
}

async function processFigures(): Promise<void> {
  using dir = tempDir("nodecore-bench-");
  const started = performance.now();
  let upAt = started;
  const cluster = await formProcessCluster(dir.path, 200, (step) => {
    const now = performance.now();
    if (step === "node1 UP") figure("bootstrap: process start → node UP (one node, processes)", ms(now - started));
    else if (step.endsWith(" UP")) upAt = now;
    else if (step.endsWith(" etcd serving")) figure(`role change → etcd member serving on ${step.split(" ")[0]}`, ms(now - upAt));
    else if (step === "three consensus members") figure("three-node cluster formed (all UP, three consensus members)", ms(now - started));
  });
  await cluster.stop();
}

console.log(`cluster figures (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, loopback)`);
await curatorFigures();
if (!values["curator-only"]) await processFigures();
