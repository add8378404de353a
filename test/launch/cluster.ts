// `bun run cluster`: builds what changed, launches a cluster of nodes under
// qemu in a private network namespace, forms the cluster as its owner would
// (node 1 bootstraps; the owner takes ownership with out/ctl; the others
// register, are approved and get the consensus role), prints where
// everything is and how to reach it, and runs until Ctrl-C, then tears it
// all down and dies of the signal (status 130).
//
// With --processes the nodes are processes of out/init on loopback instead
// (process_launcher.ts): no VMs, no namespace, unencrypted, for development.
//
// The terminal shows the launcher's narrative (what it waits for, each
// node's boot milestones) and then the summary; the node consoles go to
// files, and to the terminal too only with --verbose, so the summary stays
// on screen. Usage: launcher_args.ts, or --help.

import { existsSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { readManifest, REPO_ROOT } from "../../image/mod.ts";
import { createLogger } from "../../internal/log/mod.ts";
import { ensureBuilt } from "./build_outputs.ts";
import { parseLauncherArgs, USAGE } from "./launcher_args.ts";
import { BOOT_MILESTONES, CONSOLE, createCluster, DEFAULT_CLUSTER_NAME, formCluster, type Cluster, type NodeVm } from "./mod.ts";
import { PROCESS_CONSENSUS_NODES } from "./launcher_args.ts";
import { launchProcessCluster, type ProcessCluster, type ProcessLaunchFigures } from "./process_launcher.ts";
import { interrupted, registerTeardown } from "./teardown.ts";
import { startKubernetes } from "./kubernetes_start.ts";
import { CLUSTER_REGISTRY_USER, HELLO_REPOSITORY, HELLO_TAG } from "./registry.ts";

/**
 * The least each step of starting Kubernetes may take (the apiserver
 * answering, every Node Ready, the default service account). Under TCG on
 * two host cores, with every node a worker, they took 282 s together
 * (README, Performance), close to the formation steps' 300 s each.
 */
/** How long the launcher waits for ctl cluster health to say healthy before it shows what it says. */
const HEALTH_WAIT_S = 180;
const KUBERNETES_STEP_TIMEOUT_MS = 15 * 60_000;
import { TEST_IMAGE_REF } from "../../internal/containerd/mod.ts";
import type { FormedCluster } from "./cluster_formation.ts";

/** Keeps the process alive while it waits for Ctrl-C. */
const KEEPALIVE_MS = 1 << 30;
/**
 * A terminal's Ctrl-C reaches the launcher and the commands it runs in the
 * foreground (builds, cp) at once, and the launcher may see a command die
 * of it before it sees the signal: a failure waits this long for the signal.
 */
const SIGNAL_GRACE_MS = 200;

const parsed = parseLauncherArgs(process.argv.slice(2));
switch (parsed.kind) {
  case "help":
    process.stdout.write(USAGE);
    process.exit(0);
  case "error":
    process.stderr.write(`cluster: ${parsed.message}\n`);
    process.exit(2);
  case "launch":
    break;
  default: {
    const unreachable: never = parsed;
    throw new Error(`unknown parse result ${JSON.stringify(unreachable)}`);
  }
}
const options = parsed.options;

const log = createLogger("cluster");
const shown = (path: string) => relative(process.cwd(), path) || path;

/**
 * Ends the launcher after a failure: says what failed, tears down, exits 1.
 * Once a signal has started the teardown, the failure is its consequence (a
 * console that ended, a namespace that is gone): say nothing and let the
 * teardown end the process.
 */
async function fail(message: string, extra: { detail?: string; cluster?: Cluster } = {}): Promise<never> {
  await Bun.sleep(SIGNAL_GRACE_MS);
  if (interrupted()) return new Promise<never>(() => {});
  log.error(message);
  if (extra.detail) process.stderr.write(`${extra.detail}\n`);
  await extra.cluster?.close();
  process.exit(1);
}

/**
 * Logs each boot milestone as the node reaches it (without progress lines:
 * formation already says what it waits for). Rejects if the node shows a
 * FATAL banner, which means it will never get UP.
 */
function watchBoot(node: NodeVm): Promise<never> {
  for (const { name, pattern } of BOOT_MILESTONES) {
    void node.console.waitFor(pattern, { timeoutMs: options.timeoutMs }).then(
      (line) => log.info(`${node.name}: ${name}`, { after: `${(line.ms / 1000).toFixed(1)}s` }),
      () => {},
    );
  }
  return node.console.waitFor(CONSOLE.fatalBanner, { timeoutMs: options.timeoutMs }).then(
    () => {
      throw new Error(`${node.name} showed a FATAL banner; see ${shown(node.files.consoleLog)}`);
    },
    () => new Promise<never>(() => {}),
  );
}

/** A field of the node's last "node is UP" line (node=..., roles=...). */
function upField(node: NodeVm, field: string): string {
  const line = [...node.console.lines].reverse().find((l) => CONSOLE.nodeUp.test(l.text))?.text ?? "";
  return new RegExp(`\\b${field}=(\\S+)`).exec(line)?.[1] ?? "?";
}

/** Whether the image carries Kubernetes (built by default; a user's own with --kubernetes). */
function hasKubernetes(imageDir: string): boolean {
  return readManifest(imageDir).system.files.some((f) => f.endsWith("/kube-apiserver"));
}

/** The hello image in the launcher's registry, as a pod names it. */
function helloRef(cluster: Cluster): string {
  return cluster.registry ? `${cluster.registry.host}/${HELLO_REPOSITORY}:${HELLO_TAG}` : TEST_IMAGE_REF;
}

function summary(cluster: Cluster, imageDir: string, kubernetesMs: number | undefined): string {
  const rows = cluster.nodes.map((n) => [n.name, n.address, upField(n, "node"), upField(n, "roles"), shown(n.files.consoleLog)]);
  const header = ["node", "address", "node ID", "roles", "console log"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const table = [header, ...rows].map((r) => "  " + r.map((c, i) => c.padEnd(widths[i]!)).join("   ")).join("\n");
  const first = cluster.nodes[0]!;
  const ctl = shown(cluster.dir.ctlWrapper);
  // package.json's ctl script runs the default cluster's wrapper.
  const viaBun = cluster.name === DEFAULT_CLUSTER_NAME ? ` (or: bun run ctl ...)` : "";
  const kubectl = shown(cluster.dir.kubectlWrapper);
  return [
    "",
    `cluster ${cluster.name} is up: ${cluster.nodes.length} node${cluster.nodes.length === 1 ? "" : "s"} on ${cluster.ns.subnet.prefix}.0/24 inside network namespace ${cluster.ns.name}`,
    "",
    table,
    "",
    `  ctl           ${ctl} runs out/ctl as the owner inside the namespace${viaBun}:`,
    `                ${ctl} node list`,
    `                ${ctl} cluster info`,
    `                ${ctl} etcd credentials ${shown(cluster.dir.path)}/etcd   (then: ip netns exec ${cluster.ns.name} out/system/usr/bin/etcdctl ...)`,
    `  ctl config    ${shown(cluster.dir.ctlConfig)}   (ctl --config: owner key, certificate, CA, endpoints)`,
    `  owner key     ${shown(cluster.owner.pemPath)}   (node1 was bootstrapped with its public key)`,
    `  QMP sockets   ${shown(first.files.qmpSocket).replace(first.name, "<node>")}`,
    "",
    ...(kubernetesMs === undefined
      ? ["  No Kubernetes: the image carries no Kubernetes binaries (it was built with --kubernetes and a folder without them)."]
      : [
          `  kubernetes    node1 is the controller, every node a worker; all Ready ${(kubernetesMs / 1000).toFixed(0)} s after the roles were set.`,
          `                ${kubectl} runs the built kubectl as the owner inside the namespace (kubeconfig: ${shown(cluster.dir.kubeconfig)}):`,
          `                ${kubectl} get nodes -o wide`,
          `                ${kubectl} run hello --image=${helloRef(cluster)}`,
          `                ${kubectl} wait --for=condition=Ready pod/hello --timeout=300s`,
          `                ${kubectl} exec hello -- busybox wget -qO- http://127.0.0.1:8080/`,
          `  registry      ${cluster.registry?.host ?? "(none)"} on the cluster network (TLS: ${shown(cluster.registry?.caFile ?? "-")}, user ${CLUSTER_REGISTRY_USER}, password in ${shown(join(cluster.dir.path, "registry", "password"))});`,
          `                the cluster pulls from it (ctl cluster registry list); ${TEST_IMAGE_REF} (busybox) is preloaded on every worker`,
          `  network       pods on different nodes talk over the WireGuard mesh the curator distributes; Services and the cluster DNS answer them:`,
          `                ${kubectl} exec hello -- busybox nslookup kubernetes.default.svc.cluster.local`,
          `                ${ctl} node describe node2        (its clusternet line: the mesh's peers and their handshakes)`,
        ]),
    "",
    `Press Ctrl-C to stop: the VMs are killed and the namespace removed; disks and logs stay in ${shown(cluster.dir.path)} until the next launch.`,
    "",
  ].join("\n");
}

/** What the launcher prints once node processes form a cluster. */
function processSummary(cluster: ProcessCluster, figures: ProcessLaunchFigures): string {
  const rows = cluster.nodes.map((n) => [n.name, n.address, cluster.ids.get(n.name) ?? "?", shown(n.logFile)]);
  const header = ["node", "address", "node ID", "log (JSON lines)"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const table = [header, ...rows].map((r) => "  " + r.map((c, i) => c.padEnd(widths[i]!)).join("   ")).join("\n");
  const ctl = shown(cluster.dir.ctlWrapper);
  const viaBun = cluster.name === DEFAULT_CLUSTER_NAME ? ` (or: bun run ctl ...)` : "";
  const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
  return [
    "",
    `cluster ${cluster.name} is up: ${cluster.nodes.length} node processes on loopback — UNENCRYPTED, FOR DEVELOPMENT (plain directories, nothing sealed)`,
    "",
    table,
    "",
    `  ctl           ${ctl} runs out/ctl as the owner${viaBun}:`,
    `                ${ctl} node list`,
    `                ${ctl} cluster info`,
    `  ctl config    ${shown(cluster.dir.ctlConfig)}   (ctl --config: owner key, certificate, CA, endpoints)`,
    `  node roots    ${shown(cluster.dir.path)}/<node>/   (esp/, data/ — the node's disk, as plain files)`,
    "",
    `  figures       node1 UP ${s(figures.node1Up)}; all ${cluster.nodes.length} UP ${s(figures.allUp)}; formed (${Math.min(PROCESS_CONSENSUS_NODES, cluster.nodes.length)} voters) ${s(figures.formed)};`,
    `                owner calls ${figures.ownerCalls}, of which reached no curator: ${figures.ownerCallFailures}${figures.ownerCallFailureReasons.length > 0 ? ` (first: ${figures.ownerCallFailureReasons[0]})` : ""}`,
    "",
    `Press Ctrl-C to stop: the node processes are stopped; their directories and logs stay in ${shown(cluster.dir.path)} until the next launch.`,
    "",
  ].join("\n");
}

/** Node processes on loopback (--processes). */
async function launchProcesses(): Promise<void> {
  if (options.build) {
    try {
      await ensureBuilt(log, { binariesOnly: true });
    } catch (err) {
      await fail("could not build", { detail: (err as Error).message });
    }
  }
  let launched: Awaited<ReturnType<typeof launchProcessCluster>>;
  const teardown = (cluster: ProcessCluster) =>
    registerTeardown({
      label: `cluster ${cluster.name} (${cluster.nodes.length} node processes)`,
      close: () => cluster.close(),
      closeSync: () => {
        for (const node of cluster.nodes) node.kill();
      },
    });
  try {
    launched = await launchProcessCluster({
      name: options.name,
      nodes: options.nodes,
      consensus: Math.min(PROCESS_CONSENSUS_NODES, options.nodes),
      timeoutMs: options.timeoutMs,
      logger: log,
      onCluster: teardown,
    });
  } catch (err) {
    launched = await fail("the cluster did not come up:", { detail: (err as Error).message });
  }
  const { cluster: processes, figures } = launched;
  process.stdout.write(processSummary(processes, figures));
  for (const node of processes.nodes) node.onExit((code) => processes.closing || log.warn(`${node.name} stopped; the others keep running until Ctrl-C`, { exitCode: code }));
  setInterval(() => {}, KEEPALIVE_MS);
}

/** VMs under qemu in the cluster's network namespace. */
async function launchVms(): Promise<void> {
  if (options.build) {
    try {
      await ensureBuilt(log, options.kubernetesDir ? { kubernetesDir: resolve(options.kubernetesDir) } : {});
    } catch (err) {
      await fail("could not build", { detail: (err as Error).message });
    }
  }
  const imageDir = options.imageDir ?? `${REPO_ROOT}/out/image`;
  if (!existsSync(`${imageDir}/manifest.json`)) await fail(`no image in ${imageDir}: run without --no-build`);

  let cluster: Cluster;
  try {
    cluster = await createCluster({
      name: options.name,
      nodes: options.nodes,
      fresh: !options.keep,
      quiet: !options.verbose,
      logger: log,
      imageDir,
      ...(options.memoryMiB !== undefined ? { memoryMiB: options.memoryMiB } : {}),
      ...(options.cpus !== undefined ? { cpus: options.cpus } : {}),
      ...(options.accel !== undefined ? { accel: options.accel } : {}),
    });
  } catch (err) {
    cluster = await fail(`could not launch the cluster: ${(err as Error).message}`);
  }

  let formed: FormedCluster | undefined;
  try {
    // A node with bad parameters says so in a banner and never gets UP: stop waiting at once.
    let fatal!: (err: unknown) => void;
    const fatalBanner = new Promise<never>((_, reject) => (fatal = reject));
    formed = await Promise.race([formCluster(cluster, { timeoutMs: options.timeoutMs, logger: log, onStart: (node) => void watchBoot(node).catch(fatal) }), fatalBanner]);
  } catch (err) {
    await fail("the cluster did not come up; what the node said last:", { detail: (err as Error).message, cluster });
  }
  let kubernetesMs: number | undefined;
  if (hasKubernetes(imageDir)) {
    try {
      kubernetesMs = await startKubernetes(cluster, formed!, { timeoutMs: Math.max(options.timeoutMs, KUBERNETES_STEP_TIMEOUT_MS), logger: log });
    } catch (err) {
      await fail("Kubernetes did not come up:", { detail: `${(err as Error).message}\nthe node consoles: ${shown(cluster.dir.path)}/<node>.console.log`, cluster });
    }
  }
  // The owner's one verdict, as a script would wait for it (ctl cluster health --wait).
  const verdict = await formed!.ctl("cluster", "health", "--wait", "--wait-timeout", String(HEALTH_WAIT_S));
  process.stdout.write(summary(cluster, imageDir, kubernetesMs));
  process.stdout.write(
    `\n${verdict.exitCode === 0 ? "ctl cluster health" : `ctl cluster health (exit ${verdict.exitCode} after ${HEALTH_WAIT_S} s)`}:\n${verdict.stdout
      .trim()
      .split("\n")
      .map((l) => (l ? `  ${l}` : l))
      .join("\n")}\n`,
  );
  for (const node of cluster.nodes) {
    void node.exited().then((exit) => cluster.closing || log.warn(`${node.name} stopped; the others keep running until Ctrl-C`, { reason: exit.reason ?? exit.signal ?? exit.exitCode }));
  }
  setInterval(() => {}, KEEPALIVE_MS);
}

await (options.processes ? launchProcesses() : launchVms());
