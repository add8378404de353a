// The audit trail's figures (issue 31), printed, never asserted:
//  - what it costs an owner write: UpdateNodeLabels round trips (p50, p99)
//    against a curator that keeps the trail and one that does not, each on
//    its own real etcd and curator on loopback;
//  - how soon a follower sees an event: a write answered → its event
//    received by a GetEvents follower (p50, p99).
//   bun bench/audit.ts [writes=300]

import { X509Certificate } from "node:crypto";
import { Management, type ClusterEvent } from "../proto/gen/api/management_pb.ts";
import { issueOwnerCertificate, type KeyPair } from "../internal/pki/mod.ts";
import { startTestCluster, type TestCluster } from "../internal/curator/test_cluster.ts";
import { figure, ms, percentile } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const WRITES = wholeNumber("writes", benchArgs({}, { name: "writes", default: "300", help: "audited writes" }).positional);

function ownerOf(cluster: TestCluster): { kind: "owner"; certificate: X509Certificate; privateKey: KeyPair["privateKey"] } {
  return { kind: "owner", certificate: issueOwnerCertificate(cluster.clusterCA, cluster.ownerKey.publicKey), privateKey: cluster.ownerKey.privateKey };
}

/** Round trips of WRITES label writes (after 20 to warm up), in ms. */
async function writeLatencies(auditTrail: boolean): Promise<number[]> {
  const cluster = await startTestCluster({ auditTrail });
  try {
    const management = cluster.client(Management, ownerOf(cluster));
    const samples: number[] = [];
    for (let i = 0; i < WRITES + 20; i++) {
      const started = performance.now();
      await management.updateNodeLabels({ id: cluster.node.id, upsert: [{ key: "bench", value: String(i) }] });
      if (i >= 20) samples.push(performance.now() - started);
    }
    management.close();
    return samples;
  } finally {
    await cluster.close();
  }
}

/** Write answered → its event at a follower, in ms. */
async function followLatencies(): Promise<number[]> {
  const cluster = await startTestCluster();
  const stop = new AbortController();
  try {
    const management = cluster.client(Management, ownerOf(cluster));
    const waiting = new Map<string, (at: number) => void>();
    const following = (async () => {
      for await (const event of management.getEvents({ last: 1, follow: true }, { signal: stop.signal }) as AsyncIterable<ClusterEvent>) {
        waiting.get(event.detail)?.(performance.now());
      }
    })().catch(() => {});
    await Bun.sleep(500);
    const samples: number[] = [];
    for (let i = 0; i < Math.min(WRITES, 100); i++) {
      const detail = `{upsert: [{key: "follow", value: "${i}"}], delete: []}`;
      const seen = new Promise<number>((resolve) => waiting.set(detail, resolve));
      await management.updateNodeLabels({ id: cluster.node.id, upsert: [{ key: "follow", value: String(i) }] });
      const answered = performance.now();
      samples.push(Math.max(0, (await seen) - answered));
      waiting.delete(detail);
    }
    stop.abort();
    await following;
    management.close();
    return samples;
  } finally {
    await cluster.close();
  }
}

const cpu = (await Bun.file("/proc/cpuinfo").text()).match(/model name\s*:\s*(.*)/)?.[1] ?? "unknown CPU";
console.log(`audit trail figures: ${WRITES} label writes each; ${cpu}, ${navigator.hardwareConcurrency} cores; real etcd and curator on loopback`);
const without = await writeLatencies(false);
const with_ = await writeLatencies(true);
figure("owner write, no audit trail: p50 / p99", `${ms(percentile(without, 50))} / ${ms(percentile(without, 99))}`);
figure("owner write, audit trail kept: p50 / p99", `${ms(percentile(with_, 50))} / ${ms(percentile(with_, 99))}`);
const follow = await followLatencies();
figure("write answered → its event at a follower: p50 / p99", `${ms(percentile(follow, 50))} / ${ms(percentile(follow, 99))}`);
