// Does the node add anything to the apiserver's start? One node process on
// loopback holds the controller role (the real components from out/system).
// Each trial, on the same etcd with the same data:
//  - under nodecore: the role set again; from the node's "process started"
//    line for kube-apiserver to its "kube-apiserver is ready" line (the node
//    asks /readyz every READINESS_POLL_MS, each answer given READINESS_TIMEOUT_MS);
//  - by hand: the role unset, then the same binary started here with the
//    same flags and files (another port), asked /readyz the same way,
//    from spawn to the first "ok".
// Prints min / median / max of each and the ratio of the medians (the
// goal: ≤ 1.1); asserts nothing.
//   bun bench/apiserver_start.ts [trials=5]

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { apiserverArgs, parseKubeconfig, READINESS_POLL_MS, READINESS_TIMEOUT_MS } from "../internal/kubernetes/mod.ts";
import { eventually, systemTree, tempDir } from "../internal/testing/mod.ts";
import { NodeProcess, loopbackBlock, ownedNode, type LogLine } from "../test/support/node_process.ts";
import { figure, percentile, spread } from "./figures.ts";
import { benchArgs, wholeNumber } from "./args.ts";

const TRIALS = wholeNumber("trials", benchArgs({}, { name: "trials", default: "5", help: "starts of each kind" }).positional);
const STEP_TIMEOUT_MS = 120_000;
const BY_HAND_PORT = 16443;

const dir = tempDir("nodecore-bench-apiserver-");
const node = new NodeProcess("node1", join(dir.path, "node1"), loopbackBlock()(43));
const owned = ownedNode(node, dir.path);
const ctl = async (...args: string[]) => {
  const result = await owned.ctl(...args);
  if (result.code !== 0) throw new Error(`ctl ${args.join(" ")}: ${result.stderr}`);
  return result;
};
const at = (line: LogLine) => Date.parse(line.time);
const isApiserver = (l: LogLine) => l.msg === "process started" && String(l.command).endsWith("/kube-apiserver");

async function controllerGone(id: string): Promise<void> {
  await eventually(
    async () => {
      const nodes = JSON.parse((await ctl("node", "list", "--json")).stdout) as { id: string; services: { name: string }[] }[];
      if (nodes.find((n) => n.id === id)?.services.some((s) => s.name === "kube-apiserver")) throw new Error("the controller still runs");
    },
    { timeoutMs: STEP_TIMEOUT_MS, what: "the controller stopped" },
  );
}

const underNode: number[] = [];
const byHand: number[] = [];
try {
  const id = String((await owned.bootstrap({ timeoutMs: STEP_TIMEOUT_MS })).node);
  await node.waitForLog((l) => l.msg === "kube-scheduler is ready", { what: "the first controller ready", timeoutMs: STEP_TIMEOUT_MS });
  const kubeconfig = join(dir.path, "owner.kubeconfig");
  await ctl("kubeconfig", kubeconfig);
  const owner = parseKubeconfig(readFileSync(kubeconfig, "utf8"));
  const controllerDir = join(node.layout.ephemeral.kubernetes, "controller");
  const byHandArgs = apiserverArgs({ dir: controllerDir, address: node.address, etcdUrl: `https://${node.address}:2379` }).map((a) =>
    a.startsWith("--secure-port=") ? `--secure-port=${BY_HAND_PORT}` : a,
  );

  for (let trial = 1; trial <= TRIALS; trial++) {
    await ctl("node", "roles", "unset", id, "kubernetes-controller");
    await controllerGone(id);
    const from = node.logs.length;
    await ctl("node", "roles", "set", id, "kubernetes-controller");
    const started = await node.waitForLog(isApiserver, { from, timeoutMs: STEP_TIMEOUT_MS, what: "the apiserver started" });
    const ready = await node.waitForLog((l) => l.msg === "kube-apiserver is ready", { from, timeoutMs: STEP_TIMEOUT_MS, what: "the apiserver ready" });
    underNode.push(at(ready) - at(started));
    await node.waitForLog((l) => l.msg === "kube-scheduler is ready", { from, timeoutMs: STEP_TIMEOUT_MS, what: "the scheduler ready" });

    // The same apiserver, by hand, on the same etcd and files, while the node runs none.
    await ctl("node", "roles", "unset", id, "kubernetes-controller");
    await controllerGone(id);
    const t0 = performance.now();
    const child = Bun.spawn([join(systemTree(), "kubernetes", "bin", "kube-apiserver"), ...byHandArgs], { stdout: "ignore", stderr: "ignore" });
    try {
      for (;;) {
        const ok = await fetch(`https://${node.address}:${BY_HAND_PORT}/readyz`, {
          signal: AbortSignal.timeout(READINESS_TIMEOUT_MS),
          tls: { ca: owner.ca, cert: owner.certificate, key: owner.privateKey },
        } as RequestInit)
          .then(async (r) => r.ok && (await r.text()).trim() === "ok")
          .catch(() => false);
        if (ok) break;
        if (performance.now() - t0 > STEP_TIMEOUT_MS) throw new Error("the apiserver started by hand never answered /readyz");
        await Bun.sleep(READINESS_POLL_MS);
      }
      byHand.push(performance.now() - t0);
    } finally {
      child.kill("SIGTERM");
      await child.exited;
    }
    console.log(`  trial ${trial}: under nodecore ${(underNode.at(-1)! / 1000).toFixed(2)} s, by hand ${(byHand.at(-1)! / 1000).toFixed(2)} s`);
  }
  console.log(`\nkube-apiserver start → /readyz, one node process on loopback, the same etcd (${TRIALS} trials; min / median / max)`);
  figure("under nodecore (process started → ready)", spread(underNode, 2));
  figure("by hand (spawn → first ok)", spread(byHand, 2));
  figure("ratio of the medians (nodecore / by hand)", (percentile(underNode, 50) / percentile(byHand, 50)).toFixed(2));
} finally {
  await node.stop();
  dir[Symbol.dispose]();
}
