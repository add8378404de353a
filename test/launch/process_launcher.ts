// Clusters of node processes on loopback (`bun run cluster --processes`):
// the same out/init the VMs boot, one process per node, each with a plain
// directory standing in for its disk and an address of its own in
// 127.0.0.0/8. UNENCRYPTED, FOR DEVELOPMENT: nothing is sealed and the data
// lies in plain files. It is the fast way to try the system and to run
// apps and tests against a cluster of many nodes; VMs are the real thing.
//
//   out/cluster/<name>/
//   ├── owner/              out/ctl's config directory (owner key, certificate, CA, endpoints)
//   ├── ctl                 out/ctl as the owner (loopback needs no namespace)
//   ├── register.pb         register parameters for nodes 2..N
//   ├── <node>/             the node's root: esp/ (parameters, sealed config), data/, ephemeral/
//   └── <node>.log          its log, one JSON object per line
//
// Formation, as an owner would do it:
//   node1 (bootstrap) ─▶ UP ─▶ ctl takeownership ─▶ ctl params register
//   node2..N start at once with the register parameters ─▶ each asks for
//   approval ─▶ the launcher approves it (as the owner, in process) ─▶ UP
//   the consensus role, one node at a time (etcd takes one learner at a
//   time), to the first `consensus` nodes ─▶ that many voting members
//
// Every wait is on a node's log line or on the cluster's answer: nothing
// sleeps for a fixed time. The owner's calls are counted, with every one
// that reached no curator, so a connect failure shows in the figures.

import { appendFileSync, existsSync, mkdirSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { Management } from "../../proto/gen/api/management_pb.ts";
import type { Logger } from "../../internal/log/mod.ts";
import { configPaths, listNodes, loadCredentials, OperatorError, ownerDialCredentials, withFailover, type OwnerCredentials } from "../../internal/operator/mod.ts";
import { CuratorPool, NoCuratorError } from "../../internal/curator/client/mod.ts";
import { DEFAULT_SYSTEM_TREE, REPO_ROOT } from "../../image/mod.ts";
import { ClusterDir } from "./cluster_dir.ts";
import { CTL_BINARY, writeCtlWrapper } from "./ctl_wrapper.ts";
import { encodeNodeParameters, loadOrCreateOwnerKey } from "./node_parameters.ts";
import { killLeftShims } from "../support/node_process.ts";

export const INIT_BINARY = join(REPO_ROOT, "out", "init");
/** A node process's log line (the node logger's JSON form). */
export interface ProcessLogLine {
  time?: string;
  level?: string;
  component?: string;
  msg?: string;
  [field: string]: unknown;
}

/** Lines a node keeps in memory for waits that start after the line came (the whole log is in its file). */
const RECENT_LINES = 256;
const STOP_GRACE_MS = 20_000;
/** The owner's per-call deadline during formation. */
const OWNER_CALL_TIMEOUT_MS = 15_000;
const NODE_UP = "node is UP";
/** The pause before a refused consensus role is asked for again. */
const RETRY_PAUSE_MS = 250;
const WAITING_FOR_APPROVAL = /^waiting for the owner to approve node (node-[0-9a-f]+)/;
const FATAL = "cannot enrol: bad node parameters";

/** 127.77.<block>.<10+i>: a /24 of loopback per cluster name, so two launched clusters do not collide. */
export function processAddress(clusterName: string, index: number): string {
  let hash = 0;
  for (const c of clusterName) hash = (hash * 31 + c.charCodeAt(0)) >>> 0;
  return `127.77.${hash % 250}.${10 + index}`;
}

interface Waiter {
  match: (line: ProcessLogLine) => boolean;
  resolve: (line: ProcessLogLine) => void;
}

/** The system tree node processes run etcd, the runtime and Kubernetes from (bun run build lays it out). */
export const SYSTEM_TREE = join(REPO_ROOT, DEFAULT_SYSTEM_TREE);

/** One node process: out/init with a root directory and a loopback address; its log to a file, lines matched as they come. */
export class LaunchedNode {
  readonly logFile: string;
  private child: ReturnType<typeof Bun.spawn> | undefined;
  private reading: Promise<void> | undefined;
  private readonly recent: ProcessLogLine[] = [];
  private readonly waiters = new Set<Waiter>();
  private exitListeners: ((code: number | null) => void)[] = [];

  constructor(
    readonly name: string,
    readonly root: string,
    readonly address: string,
    logDir: string,
  ) {
    mkdirSync(root, { recursive: true });
    this.logFile = join(logDir, `${name}.log`);
  }

  get running(): boolean {
    return this.child !== undefined && this.child.exitCode === null && this.child.signalCode === null;
  }

  writeParameters(bytes: Uint8Array): void {
    const dir = join(this.root, "esp", "nodecore");
    mkdirSync(dir, { recursive: true });
    writeFileSync(join(dir, "parameters.pb"), bytes);
  }

  start(): void {
    const child = Bun.spawn([INIT_BINARY, "--root", this.root, "--address", this.address, "--system", SYSTEM_TREE], {
      stdin: "ignore",
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, NODECORE_LOG_FORMAT: "json" },
    });
    this.child = child;
    this.reading = Promise.all([this.read(child.stderr as ReadableStream<Uint8Array>), this.read(child.stdout as ReadableStream<Uint8Array>)]).then(() => {});
    void child.exited.then((code) => {
      for (const listener of this.exitListeners) listener(code);
    });
  }

  /** Called when the process ends (with its exit code, null if killed by a signal). */
  onExit(listener: (code: number | null) => void): void {
    this.exitListeners.push(listener);
  }

  private async read(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of stream) {
      const text = decoder.decode(chunk, { stream: true });
      appendFileSync(this.logFile, text);
      buffered += text;
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const raw = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        let line: ProcessLogLine;
        try {
          line = JSON.parse(raw) as ProcessLogLine;
        } catch {
          line = { msg: raw };
        }
        this.recent.push(line);
        if (this.recent.length > RECENT_LINES) this.recent.shift();
        for (const waiter of [...this.waiters]) {
          if (!waiter.match(line)) continue;
          this.waiters.delete(waiter);
          waiter.resolve(line);
        }
      }
    }
  }

  /** The first log line (recent, or to come) that matches; fails if the process ends or the deadline passes first. */
  waitFor(match: (line: ProcessLogLine) => boolean, what: string, timeoutMs: number): Promise<ProcessLogLine> {
    const seen = this.recent.find(match);
    if (seen) return Promise.resolve(seen);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiters.delete(waiter);
        reject(new Error(`${this.name} did not ${what} within ${Math.round(timeoutMs / 1000)} s; its log: ${this.logFile}`));
      }, timeoutMs);
      const waiter: Waiter = {
        match,
        resolve: (line) => {
          clearTimeout(timer);
          resolve(line);
        },
      };
      this.waiters.add(waiter);
      this.onExit((code) => {
        if (!this.waiters.delete(waiter)) return;
        clearTimeout(timer);
        reject(new Error(`${this.name} ended (exit ${code ?? "by a signal"}) before it would ${what}; its log: ${this.logFile}`));
      });
    });
  }

  /** The last lines the node logged, for an error message. */
  lastMessages(count = 3): string {
    return this.recent
      .slice(-count)
      .map((l) => `${l.component ?? ""} ${l.msg ?? ""}`.trim())
      .join(" | ");
  }

  /** Kills the process at once (teardown without an event loop), and the containerd shims it leaves. */
  kill(): void {
    this.child?.kill("SIGKILL");
    killLeftShims(this.root);
  }

  /**
   * Stops the process (SIGTERM, then SIGKILL after STOP_GRACE_MS), then
   * kills the containerd shims it leaves: on a host without a cgroup v2
   * hierarchy nothing else ends a stopped node's pods (killLeftShims).
   */
  async stop(): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill("SIGTERM");
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
    await child.exited;
    clearTimeout(timer);
    await this.reading;
    this.child = undefined;
    killLeftShims(this.root);
  }
}

export interface ProcessLaunchOptions {
  name: string;
  nodes: number;
  /** How many nodes get the consensus role (node1 first). */
  consensus: number;
  /** Deadline of each wait. */
  timeoutMs: number;
  logger: Logger;
  /** Called with the cluster before any node starts (to tear it down on a signal). */
  onCluster?: (cluster: ProcessCluster) => void;
}

/** What the launch measured (ms from the launch's start), printed by the launcher. */
export interface ProcessLaunchFigures {
  node1Up: number;
  allUp: number;
  formed: number;
  ownerCalls: number;
  /** Owner calls that reached no curator (connect failures, deadlines) and were tried again. */
  ownerCallFailures: number;
  /** Why they reached none: the first few errors, as the owner saw them. */
  ownerCallFailureReasons: string[];
}

export class ProcessCluster {
  closing = false;

  constructor(
    readonly name: string,
    readonly dir: ClusterDir,
    readonly nodes: LaunchedNode[],
    readonly ids: Map<string, string>,
  ) {}

  async close(): Promise<void> {
    this.closing = true;
    await Promise.all(this.nodes.map((n) => n.stop()));
    this.dir.release();
  }
}

/** Runs out/ctl with the owner's config (loopback: no namespace). */
async function runCtl(dir: ClusterDir, ...args: string[]): Promise<string> {
  const child = Bun.spawn([CTL_BINARY, "--config", dir.ctlConfig, ...args], { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  if (code !== 0) throw new Error(`ctl ${args.join(" ")} failed: ${stderr.trim()}`);
  return stdout;
}

/**
 * Nodes started at once, each batch UP before the next starts: k3s advises
 * joining agents in batches of 50 or fewer, and 100 at once put the owner's
 * calls behind a storm of handshakes on this two-core host (issue 46).
 */
export const REGISTER_BATCH = 50;
// The consensus roles wait for every node to be UP. Giving them as each
// consensus node is UP, while the rest register, was tried twice (on
// 2026-12-01 and 12-02) and gained nothing on two cores: 95.4 and 73.6 s
// to formed, against 71.0 s (docs/performance.md), the learners' catch-up
// slowed by the storm as much as the storm by them.
/** How many of the owner's failed calls the figures keep the error of. */
const FAILURE_REASONS_KEPT = 10;

export async function launchProcessCluster(options: ProcessLaunchOptions): Promise<{ cluster: ProcessCluster; figures: ProcessLaunchFigures }> {
  const { logger, timeoutMs } = options;
  const started = performance.now();
  const since = () => performance.now() - started;
  const dir = ClusterDir.open(join(REPO_ROOT, "out", "cluster", options.name), { fresh: true });
  writeCtlWrapper(dir.ctlWrapper, { cluster: options.name, config: dir.ctlConfig });
  const owner = loadOrCreateOwnerKey(dir.ownerKey);
  const nodes = Array.from({ length: options.nodes }, (_, i) => new LaunchedNode(`node${i + 1}`, join(dir.path, `node${i + 1}`), processAddress(options.name, i + 1), dir.path));
  const cluster = new ProcessCluster(options.name, dir, nodes, new Map());
  options.onCluster?.(cluster);
  const figures: ProcessLaunchFigures = { node1Up: 0, allUp: 0, formed: 0, ownerCalls: 0, ownerCallFailures: 0, ownerCallFailureReasons: [] };
  const [first, ...others] = nodes as [LaunchedNode, ...LaunchedNode[]];
  const votes = (node: LaunchedNode) => node.waitFor((l) => l.msg === "status pushed" && String(l.services ?? "").includes("consensus=voter"), "report a voting etcd member", timeoutMs);
  const upLine = (node: LaunchedNode) => node.waitFor((l) => l.msg === NODE_UP, "get UP", timeoutMs);
  // Rejects when the node says it cannot enrol; otherwise never settles (its
  // exit or the deadline is left to the wait it races with).
  const fatal = (node: LaunchedNode) =>
    node
      .waitFor((l) => typeof l.msg === "string" && l.msg.startsWith(FATAL), "say why it cannot enrol", timeoutMs)
      .then(
        (line): never => {
          throw new Error(`${node.name} cannot start: ${String(line.error ?? line.msg)}`);
        },
        () => new Promise<never>(() => {}),
      );

  // The owner's calls, in process: each one that reaches no curator is
  // counted and tried again. They share one pool of connections, as one
  // program making many calls would: 50 approvals at once, each dialling
  // afresh, were a handshake storm of the owner's own beside the nodes'
  // (CI lost 3-7 of them to connection resets while node1's listener
  // dropped none).
  let credentials: OwnerCredentials | undefined;
  let pool: CuratorPool | undefined;
  const asOwner = async <T>(what: string, call: (credentials: OwnerCredentials, pool: CuratorPool) => Promise<T>): Promise<T> => {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      credentials ??= loadCredentials(configPaths(dir.ctlConfig));
      pool ??= new CuratorPool(ownerDialCredentials(credentials));
      figures.ownerCalls++;
      try {
        return await call(credentials, pool);
      } catch (err) {
        const unreachable = err instanceof OperatorError && err.cause instanceof NoCuratorError;
        if (!unreachable || performance.now() > deadline) throw new Error(`${what}: ${(err as Error).message}`, { cause: err });
        figures.ownerCallFailures++;
        if (figures.ownerCallFailureReasons.length < FAILURE_REASONS_KEPT) figures.ownerCallFailureReasons.push(`${what}: ${(err as Error).message}`);
        logger.warn(`${what}: no curator answered; trying again`, { reason: (err as Error).message });
      }
    }
  };

  try {
    first.writeParameters(encodeNodeParameters({ kind: "bootstrap" }, owner)!);
    first.start();
    const up = await Promise.race([upLine(first), fatal(first)]);
    figures.node1Up = since();
    cluster.ids.set(first.name, String(up.node));
    logger.info(`${first.name} bootstrapped the cluster`, { node: up.node, after: `${(figures.node1Up / 1000).toFixed(1)}s` });
    await runCtl(dir, "takeownership", first.address);
    if (others.length > 0) {
      const registerFile = join(dir.path, "register.pb");
      await runCtl(dir, "params", "register", registerFile);
      const register = await Bun.file(registerFile).bytes();
      logger.info(`starting ${others.length} more node${others.length === 1 ? "" : "s"}, at most ${REGISTER_BATCH} at a time; approving each as it asks`);
      for (let from = 0; from < others.length; from += REGISTER_BATCH) {
        if (from > 0) logger.info(`nodes ${from + 2}..${Math.min(from + REGISTER_BATCH, others.length) + 1}: starting the next batch`);
        await Promise.all(
          others.slice(from, from + REGISTER_BATCH).map(async (node) => {
            node.writeParameters(register);
            node.start();
            const asking = await Promise.race([node.waitFor((l) => typeof l.msg === "string" && WAITING_FOR_APPROVAL.test(l.msg), "register and ask for approval", timeoutMs), fatal(node)]);
            const id = WAITING_FOR_APPROVAL.exec(String(asking.msg))![1]!;
            cluster.ids.set(node.name, id);
            await asOwner(`approving ${node.name}`, (c, p) => withFailover(Management, c, (m) => m.approveNode({ id }, { timeoutMs: OWNER_CALL_TIMEOUT_MS }), undefined, p));
            await upLine(node);
          }),
        );
      }
    }
    figures.allUp = since();
    logger.info("every node is UP", { nodes: nodes.length, after: `${(figures.allUp / 1000).toFixed(1)}s` });

    const consensus = others.slice(0, Math.max(0, options.consensus - 1));
    for (const node of consensus) {
      const id = cluster.ids.get(node.name)!;
      logger.info(`giving ${node.name} the consensus role`, { node: id });
      // etcd admits one learner at a time: the refusal says to try again,
      // and the next attempt follows the node's own news of its member.
      for (;;) {
        try {
          await asOwner(`consensus role for ${node.name}`, (c, p) =>
            withFailover(Management, c, (m) => m.updateNodeRoles({ id, consensusMember: true }, { timeoutMs: OWNER_CALL_TIMEOUT_MS }), undefined, p),
          );
          break;
        } catch (err) {
          if (!/try again/.test((err as Error).message) || since() > timeoutMs * 4) throw err;
          // Once the previous joiner votes (its log says so), with a short
          // pause so that a refusal for another reason is not hammered.
          const previous = consensus[consensus.indexOf(node) - 1];
          await Promise.all([previous ? votes(previous) : undefined, Bun.sleep(RETRY_PAUSE_MS)]);
        }
      }
    }
    if (consensus.length > 0) {
      // A voter pushes its status with consensus=voter; the cluster's view is what counts.
      await Promise.all(consensus.map(votes));
      const voters = (await asOwner("listing nodes", (c) => listNodes(c, { timeoutMs: OWNER_CALL_TIMEOUT_MS }))).filter((n) =>
        n.services.some((s) => s.name === "consensus" && s.state === "voter"),
      ).length;
      if (voters !== consensus.length + 1) throw new Error(`the cluster lists ${voters} voting etcd members, not ${consensus.length + 1}`);
      // Refresh the owner's endpoints (every curator), as an owner would.
      await runCtl(dir, "cluster", "info");
    }
    figures.formed = since();
    logger.info("cluster formed", { voters: consensus.length + 1, after: `${(figures.formed / 1000).toFixed(1)}s` });
    return { cluster, figures };
  } catch (err) {
    const stuck = nodes.filter((n) => n.running).map((n) => `${n.name}: ${n.lastMessages(1)}`);
    await cluster.close();
    throw new Error(`${(err as Error).message}${stuck.length > 0 ? `\n  last words: ${stuck.slice(0, 5).join("\n  ")}` : ""}`, { cause: err });
  } finally {
    pool?.close();
  }
}
