// `bun run cluster`: builds what changed, launches a cluster of nodes under
// qemu in a private network namespace, forms the cluster as its owner would
// (node 1 bootstraps; the owner takes ownership with out/ctl; the others
// register, are approved and get the consensus role), prints where
// everything is and how to reach it, and runs until Ctrl-C, then tears it
// all down.
//
//   bun run cluster [--nodes N] [--name dev] [--quiet] [--keep]
//                   [--timeout seconds] [--memory MiB] [--no-build] [--image-dir dir]

import { existsSync } from "node:fs";
import { relative } from "node:path";
import { parseArgs } from "node:util";
import { readManifest, REPO_ROOT } from "../../image/mod.ts";
import { createLogger } from "../../internal/log/mod.ts";
import { ensureBuilt } from "./build_outputs.ts";
import { BOOT_MILESTONES, CONSOLE, createCluster, DEFAULT_CLUSTER_NAME, formCluster, type Cluster, type FormedCluster, type NodeVm } from "./mod.ts";

/** A cluster of three: every node a consensus member, as issue #5 asks of the main command. */
const DEFAULT_NODES = 3;

/** TCG is slow and the host may be busy: generous, per node. */
const DEFAULT_UP_TIMEOUT_S = 300;
/** Keeps the process alive while it waits for Ctrl-C. */
const KEEPALIVE_MS = 1 << 30;

const { values } = parseArgs({
  options: {
    nodes: { type: "string", default: String(DEFAULT_NODES) },
    name: { type: "string", default: DEFAULT_CLUSTER_NAME },
    quiet: { type: "boolean", default: false },
    keep: { type: "boolean", default: false },
    timeout: { type: "string", default: String(DEFAULT_UP_TIMEOUT_S) },
    memory: { type: "string" },
    "no-build": { type: "boolean", default: false },
    "image-dir": { type: "string" },
    help: { type: "boolean", default: false },
  },
  strict: true,
});
if (values.help) {
  process.stdout.write(
    "usage: bun run cluster [--nodes N] [--name dev] [--quiet] [--keep] [--timeout seconds] [--memory MiB] [--no-build] [--image-dir dir]\n" +
      "  --quiet     do not echo the consoles (they are in out/cluster/<name>/<node>.console.log)\n" +
      "  --keep      boot the disks of the last launch again instead of fresh ones\n" +
      "  --image-dir boot the image in dir instead of out/image (with --no-build: one built elsewhere)\n",
  );
  process.exit(0);
}

const log = createLogger("cluster");
const nodeCount = Number(values.nodes);
const timeoutMs = Number(values.timeout) * 1000;
const shown = (path: string) => relative(process.cwd(), path) || path;

/** Prints each boot milestone as the node reaches it; resolves when the node is UP. */
async function followBoot(node: NodeVm): Promise<void> {
  for (const { name, pattern } of BOOT_MILESTONES.filter((m) => m.pattern !== CONSOLE.nodeUp)) {
    void node.console.waitFor(pattern, { timeoutMs }).then(
      (line) => log.info(`${node.name}: ${name}`, { after: `${(line.ms / 1000).toFixed(1)}s` }),
      () => {},
    );
  }
  // A node with bad parameters says so in a banner and never gets UP: stop waiting at once.
  const fatal = node.console.waitFor(CONSOLE.fatalBanner, { timeoutMs }).then(
    () => {
      throw new Error(`${node.name} showed a FATAL banner; see ${shown(node.files.consoleLog)}`);
    },
    () => new Promise<never>(() => {}),
  );
  const up = await Promise.race([node.waitForConsole(CONSOLE.nodeUp, timeoutMs), fatal]);
  log.info(`${node.name}: node is UP`, { after: `${(up.ms / 1000).toFixed(1)}s` });
}

/** A field of the node's last "node is UP" line (node=..., roles=...). */
function upField(node: NodeVm, field: string): string {
  const line = [...node.console.lines].reverse().find((l) => CONSOLE.nodeUp.test(l.text))?.text ?? "";
  return new RegExp(`\\b${field}=(\\S+)`).exec(line)?.[1] ?? "?";
}

function summary(cluster: Cluster, formed: FormedCluster): string {
  const rows = cluster.nodes.map((n) => [n.name, n.address, upField(n, "node"), upField(n, "roles"), shown(n.files.consoleLog)]);
  const header = ["node", "address", "node ID", "roles", "console log"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const table = [header, ...rows].map((r) => "  " + r.map((c, i) => c.padEnd(widths[i]!)).join("   ")).join("\n");
  const first = cluster.nodes[0]!;
  const ctl = `ip netns exec ${cluster.ns.name} ${shown(`${REPO_ROOT}/out/ctl`)} --config ${shown(formed.ctlConfig)} --owner-key ${shown(cluster.owner.pemPath)}`;
  const missingKubernetes = !readManifest(imageDir).initramfs.binaries.some((b) => b.endsWith("/kube-apiserver"));
  return [
    "",
    `cluster ${cluster.name} is up: ${cluster.nodes.length} node${cluster.nodes.length === 1 ? "" : "s"} on ${cluster.ns.subnet.prefix}.0/24 inside network namespace ${cluster.ns.name}`,
    "",
    table,
    "",
    `  owner key     ${shown(cluster.owner.pemPath)}   (node1 was bootstrapped with its public key)`,
    `  QMP sockets   ${shown(first.files.qmpSocket).replace(first.name, "<node>")}`,
    `  out/ctl       the owner has taken ownership; the nodes are reachable only inside the namespace:`,
    `                ${ctl} node list`,
    `                ${ctl} cluster info`,
    `                ${ctl} etcd credentials ${shown(cluster.dir.path)}/etcd   (then etcdctl, inside the namespace too)`,
    "",
    ...(missingKubernetes
      ? [
          "  Not there yet: Kubernetes. The image carries no Kubernetes server binaries, so nodes with",
          "  Kubernetes roles say in their status that the binaries are missing (see node list --json).",
        ]
      : []),
    "",
    `Press Ctrl-C to stop: the VMs are killed and the namespace removed; disks and logs stay in ${shown(cluster.dir.path)} until the next launch.`,
    "",
  ].join("\n");
}

if (!Number.isInteger(nodeCount) || nodeCount < 1) {
  log.error("--nodes must be a positive integer", { nodes: values.nodes });
  process.exit(2);
}
if (!values["no-build"]) await ensureBuilt(log);
const imageDir = values["image-dir"] ?? `${REPO_ROOT}/out/image`;
if (!existsSync(`${imageDir}/manifest.json`)) {
  log.error(`no image in ${imageDir}: run without --no-build`);
  process.exit(1);
}

let cluster: Cluster;
try {
  cluster = await createCluster({
    name: values.name,
    nodes: nodeCount,
    fresh: !values.keep,
    quiet: values.quiet,
    logger: log,
    imageDir,
    ...(values.memory !== undefined ? { memoryMiB: Number(values.memory) } : {}),
  });
} catch (err) {
  log.error("could not launch the cluster", { error: (err as Error).message });
  process.exit(1);
}

let formed: FormedCluster;
try {
  const following: Promise<void>[] = [];
  formed = await formCluster(cluster, { timeoutMs, logger: log, onStart: (node) => following.push(followBoot(node)) });
  await Promise.all(following);
} catch (err) {
  log.error("the cluster did not come up; what the node said last:");
  process.stderr.write(`${(err as Error).message}\n`);
  await cluster.close();
  process.exit(1);
}
process.stdout.write(summary(cluster, formed));
for (const node of cluster.nodes) {
  void node.exited().then((exit) => cluster.closing || log.warn(`${node.name} stopped; the others keep running until Ctrl-C`, { reason: exit.reason ?? exit.signal ?? exit.exitCode }));
}
setInterval(() => {}, KEEPALIVE_MS);
