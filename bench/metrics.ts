// What serving metrics costs (issue 31), printed, never asserted: three
// node processes on loopback, the first a consensus member (its scrape
// carries etcd's metrics), read over mutual TLS with a metrics reader
// certificate from `ctl metrics credentials`, one scrape after another.
//  - scrape time, p50 and p99, with etcd's metrics and without;
//  - the text's size;
//  - the node's RSS before and after the scrapes, as it reports it.
//   bun bench/metrics.ts [scrapes=200]

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { NODE_MANAGEMENT_PORT } from "../internal/nodemgmt/client/mod.ts";
import { hostPort } from "../internal/rpc/mod.ts";
import { tempDir } from "../internal/testing/mod.ts";
import { formProcessCluster } from "../test/support/process_cluster.ts";
import { figure, ms, percentile } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const SCRAPES = wholeNumber("scrapes", benchArgs({}, { name: "scrapes", default: "200", help: "scrapes of each endpoint" }).positional);

const dir = tempDir("nodecore-bench-metrics-");
const cluster = await formProcessCluster(dir.path, 160, () => {}, { consensus: 1 });
try {
  const readerDir = join(dir.path, "reader");
  await cluster.ctl("metrics", "credentials", readerDir);
  const tls = {
    ca: readFileSync(join(readerDir, "ca.pem"), "utf8"),
    cert: readFileSync(join(readerDir, "reader.pem"), "utf8"),
    key: readFileSync(join(readerDir, "reader.key"), "utf8"),
  };
  const scrape = async (index: number) => {
    const node = cluster.nodes[index]!;
    const response = await fetch(`https://${hostPort(node.address, NODE_MANAGEMENT_PORT)}/metrics`, { tls: { ...tls, serverName: cluster.ids.get(node)! } } as RequestInit);
    if (!response.ok) throw new Error(`scrape answered HTTP ${response.status}`);
    return response.text();
  };
  const rss = (text: string) => Number(/^nodecore_process_resident_memory_bytes (\d+)$/m.exec(text)?.[1] ?? NaN) / 2 ** 20;
  for (const [index, what] of [
    [0, "consensus node (with etcd's metrics)"],
    [1, "plain node"],
  ] as const) {
    const first = await scrape(index);
    const samples: number[] = [];
    let last = first;
    for (let i = 0; i < SCRAPES; i++) {
      const started = performance.now();
      last = await scrape(index);
      samples.push(performance.now() - started);
    }
    figure(`${what}: scrape time p50 / p99 (${SCRAPES} scrapes)`, `${ms(percentile(samples, 50))} / ${ms(percentile(samples, 99))}`);
    // etcd's text follows the node's own: it begins at the first metric not named nodecore_.
    const etcdStart = /^# HELP (?!nodecore_)/m.exec(last)?.index ?? last.length;
    figure(`${what}: text size / of it etcd's`, `${(last.length / 1024).toFixed(0)} KiB / ${((last.length - etcdStart) / 1024).toFixed(0)} KiB`);
    figure(`${what}: node RSS before / after the scrapes`, `${rss(first).toFixed(1)} / ${rss(last).toFixed(1)} MiB`);
  }
} finally {
  await cluster.stop();
  dir[Symbol.dispose]();
}
