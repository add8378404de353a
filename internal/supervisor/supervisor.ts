// The supervision tree: runnables, their contexts, deaths and restarts.
// See mod.ts for the rules this implements.

import { createLogger, type Logger } from "../log/mod.ts";
import { Backoff, DEFAULT_BACKOFF, type BackoffPolicy } from "./backoff.ts";
import { RestartRequest, SupervisorError } from "./errors.ts";

/** A unit of supervised work. It runs until its signal aborts; returning or throwing earlier is a death. */
export type Runnable = (ctx: RunContext) => Promise<void>;

/** What a runnable gets from its supervisor. Passed explicitly; there are no hidden globals. */
export interface RunContext {
  /** Aborts when this runnable must stop (its parent or group died, or the tree is stopping). */
  readonly signal: AbortSignal;
  /** A logger named by this runnable's dotted path. */
  readonly logger: Logger;
  /** The dotted path, e.g. `root.roleserve.controlplane`. */
  readonly path: string;
  /** Starts a child runnable, supervised on its own. */
  run(name: string, runnable: Runnable): void;
  /** Starts children that live and die together: one's death restarts them all. */
  runGroup(runnables: Record<string, Runnable>): void;
  /** Says the runnable is up; resets its restart backoff. */
  signalHealthy(): void;
  /** Says the runnable's work is complete: returning after this is not a death (children keep running). */
  signalDone(): void;
}

/**
 * starting: running, not yet healthy.   healthy: running and said so.
 * done: returned after signalDone.      dead: died, waiting to be restarted.
 * stopping: cancelled, not returned yet. stopped: returned after cancellation.
 * stuck: did not return within the grace period after cancellation.
 */
export type RunnableState = "starting" | "healthy" | "done" | "dead" | "stopping" | "stopped" | "stuck";

/** One runnable of the tree, as data. */
export interface RunnableDump {
  path: string;
  state: RunnableState;
  restarts: number;
  lastError?: string;
  /** Time since the runnable entered its current state. */
  sinceMs: number;
  /** The current restart backoff interval (before jitter). */
  backoffMs: number;
}

/** How long a cancelled runnable may take to return before it is reported as stuck. */
export const DEFAULT_STOP_GRACE_MS = 10_000;

const NAME_PATTERN = /^[a-z0-9][a-z0-9_-]*$/i;

export interface SupervisorOptions {
  /** The root runnable's logger; children log through its children. */
  logger?: Logger;
  backoff?: BackoffPolicy;
  stopGraceMs?: number;
}

/** Runnables that live and die together. A plain child is a group of one. */
interface Group {
  members: TreeNode[];
  restarting: boolean;
}

class TreeNode {
  readonly children = new Map<string, TreeNode>();
  state: RunnableState = "starting";
  since = performance.now();
  restarts = 0;
  lastError: string | undefined;
  controller = new AbortController();
  /** Bumped on every start; a context or exit from an older generation is stale. */
  generation = 0;
  running = false;
  doneSignalled = false;
  /** Resolves when the current invocation has returned (or thrown). */
  settled: Promise<void> = Promise.resolve();
  group: Group = { members: [this], restarting: false };
  readonly backoff: Backoff;

  constructor(
    readonly parent: TreeNode | undefined,
    readonly name: string,
    readonly runnable: Runnable,
    readonly logger: Logger,
    policy: BackoffPolicy,
  ) {
    this.backoff = new Backoff(policy);
  }

  get path(): string {
    return this.parent ? `${this.parent.path}.${this.name}` : this.name;
  }

  setState(state: RunnableState): void {
    if (this.state === state) return;
    this.state = state;
    this.since = performance.now();
  }
}

function describe(err: unknown): string {
  if (err instanceof Error) return err.message || err.name;
  return String(err);
}

/** An abortable sleep: resolves after `ms`, or rejects with the signal's reason. */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  signal?.throwIfAborted();
  return new Promise((resolve, reject) => {
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal?.reason);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/**
 * Resolves once the signal aborts (at once if it already has). For runnables
 * whose work is done by their children: `await untilCancelled(ctx.signal)`.
 */
export function untilCancelled(signal: AbortSignal): Promise<void> {
  if (signal.aborted) return Promise.resolve();
  return new Promise((resolve) => signal.addEventListener("abort", () => resolve(), { once: true }));
}

export class Supervisor {
  private readonly root: TreeNode;
  private readonly policy: BackoffPolicy;
  private readonly stopGraceMs: number;
  /** Aborts pending restarts once the whole tree is stopping. */
  private readonly stopping = new AbortController();
  /** Runnables that ignored cancellation and have not returned since. */
  private readonly stuck = new Map<TreeNode, number>();

  constructor(runnable: Runnable, options: SupervisorOptions = {}) {
    this.policy = options.backoff ?? DEFAULT_BACKOFF;
    this.stopGraceMs = options.stopGraceMs ?? DEFAULT_STOP_GRACE_MS;
    const logger = options.logger ?? createLogger("root");
    this.root = new TreeNode(undefined, logger.component || "root", runnable, logger, this.policy);
    this.start(this.root);
  }

  /** Cancels the whole tree and waits for every runnable to return (or be reported stuck). */
  async stop(): Promise<void> {
    this.stopping.abort(new SupervisorError("supervisor is stopping"));
    this.cancelSubtree(this.root);
    await this.awaitSubtrees([this.root]);
  }

  /** The tree as data, depth first, including runnables stuck after cancellation. */
  dump(): RunnableDump[] {
    const now = performance.now();
    const out: RunnableDump[] = [];
    const visit = (node: TreeNode) => {
      out.push({
        path: node.path,
        state: node.state,
        restarts: node.restarts,
        ...(node.lastError !== undefined ? { lastError: node.lastError } : {}),
        sinceMs: Math.round(now - node.since),
        backoffMs: node.backoff.intervalMs,
      });
      for (const child of node.children.values()) visit(child);
    };
    visit(this.root);
    for (const [node, since] of this.stuck) {
      if (!out.some((d) => d.path === node.path && d.state === "stuck")) {
        out.push({ path: node.path, state: "stuck", restarts: node.restarts, sinceMs: Math.round(now - since), backoffMs: node.backoff.intervalMs });
      }
    }
    return out;
  }

  /** The tree as an aligned text table, for consoles and status pages. */
  formatDump(): string {
    return this.dump()
      .map((d) => {
        const error = d.lastError ? `  last error: ${d.lastError}` : "";
        return `${d.path.padEnd(40)} ${d.state.padEnd(9)} restarts=${d.restarts} for ${(d.sinceMs / 1000).toFixed(1)}s${error}`;
      })
      .join("\n");
  }

  private start(node: TreeNode): void {
    const generation = ++node.generation;
    node.controller = new AbortController();
    node.children.clear();
    node.doneSignalled = false;
    node.running = true;
    node.setState("starting");
    const context = this.contextFor(node, generation);
    let result: Promise<void>;
    try {
      result = Promise.resolve(node.runnable(context));
    } catch (err) {
      result = Promise.reject(err);
    }
    node.settled = result.then(
      () => this.onExit(node, generation, { ok: true }),
      (err: unknown) => this.onExit(node, generation, { ok: false, err }),
    );
  }

  private contextFor(node: TreeNode, generation: number): RunContext {
    const isCurrent = () => node.generation === generation && !node.controller.signal.aborted;
    const runGroup = (runnables: Record<string, Runnable>) => {
      if (!isCurrent()) throw new SupervisorError(`${node.path}: cannot start children after being cancelled`);
      const names = Object.keys(runnables);
      if (names.length === 0) throw new SupervisorError(`${node.path}: empty group`);
      for (const name of names) {
        if (!NAME_PATTERN.test(name)) throw new SupervisorError(`${node.path}: invalid runnable name ${JSON.stringify(name)}`);
        if (node.children.has(name)) throw new SupervisorError(`${node.path}: a child named ${name} already exists`);
      }
      const group: Group = { members: [], restarting: false };
      for (const name of names) {
        const child = new TreeNode(node, name, runnables[name]!, node.logger.child(name), this.policy);
        child.group = group;
        group.members.push(child);
        node.children.set(name, child);
      }
      for (const child of group.members) this.start(child);
    };
    return {
      signal: node.controller.signal,
      logger: node.logger,
      path: node.path,
      run: (name, runnable) => runGroup({ [name]: runnable }),
      runGroup,
      signalHealthy: () => {
        if (node.generation !== generation || node.state !== "starting") return;
        node.setState("healthy");
        node.backoff.reset();
      },
      signalDone: () => {
        if (node.generation !== generation) return;
        node.doneSignalled = true;
        node.backoff.reset();
      },
    };
  }

  private onExit(node: TreeNode, generation: number, outcome: { ok: true } | { ok: false; err: unknown }): void {
    if (node.generation !== generation || !node.running) {
      // An invocation that was reported stuck has finally returned.
      if (this.stuck.delete(node)) node.logger.warn("stuck runnable returned at last");
      return;
    }
    node.running = false;
    if (node.controller.signal.aborted) {
      node.setState("stopped");
      return;
    }
    if (outcome.ok && node.doneSignalled) {
      node.setState("done");
      return;
    }
    const wasHealthy = node.state === "healthy";
    const reason = outcome.ok ? "returned before being cancelled without signalling done" : describe(outcome.err);
    const requested = !outcome.ok && outcome.err instanceof RestartRequest;
    // A planned restart ("got the consensus role") is no error: the last error stays the last real one.
    if (!requested) node.lastError = reason;
    node.setState("dead");
    if (requested) node.logger.info("restart requested", { reason });
    else node.logger.error("runnable died", { error: reason });
    void this.restartGroup(node, requested && wasHealthy);
  }

  /**
   * Handles a death: cancels the dead runnable's children and its group
   * siblings, waits for them, then restarts the group after the backoff
   * delay, unless the group's parent has gone away meanwhile.
   */
  private async restartGroup(dead: TreeNode, immediate: boolean): Promise<void> {
    const group = dead.group;
    if (group.restarting) return;
    group.restarting = true;
    const parent = dead.parent;
    const parentGeneration = parent?.generation;
    const ownerGone = () => this.stopping.signal.aborted || (parent !== undefined && (parent.generation !== parentGeneration || parent.controller.signal.aborted));
    try {
      for (const member of group.members) this.cancelSubtree(member);
      await this.awaitSubtrees(group.members);
      if (ownerGone()) return;
      const delayMs = immediate ? 0 : dead.backoff.next();
      dead.logger.info("restarting", { delayMs, restarts: dead.restarts + 1 });
      const abort = parent ? AbortSignal.any([parent.controller.signal, this.stopping.signal]) : this.stopping.signal;
      try {
        await sleep(delayMs, abort);
      } catch {
        return;
      }
      if (ownerGone()) return;
      for (const member of group.members) {
        member.restarts++;
        this.start(member);
      }
    } finally {
      group.restarting = false;
    }
  }

  private cancelSubtree(node: TreeNode): void {
    if (!node.controller.signal.aborted) {
      node.controller.abort(new SupervisorError(`${node.path} cancelled`));
    }
    if (node.running) node.setState("stopping");
    for (const child of node.children.values()) this.cancelSubtree(child);
  }

  /** Waits until every runnable in these subtrees has returned, up to the grace period. */
  private async awaitSubtrees(nodes: TreeNode[]): Promise<void> {
    const running: TreeNode[] = [];
    const collect = (node: TreeNode) => {
      if (node.running) running.push(node);
      for (const child of node.children.values()) collect(child);
    };
    nodes.forEach(collect);
    if (running.length === 0) return;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const graceOver = new Promise<"timeout">((resolve) => (timer = setTimeout(() => resolve("timeout"), this.stopGraceMs)));
    const result = await Promise.race([Promise.all(running.map((n) => n.settled)).then(() => "ok" as const), graceOver]);
    clearTimeout(timer);
    if (result === "ok") return;
    for (const node of running) {
      if (!node.running) continue;
      node.logger.warn("runnable ignored cancellation; continuing without waiting for it", { graceMs: this.stopGraceMs });
      node.running = false;
      node.setState("stuck");
      this.stuck.set(node, performance.now());
    }
  }
}

/** Starts a supervision tree with `runnable` at its root. */
export function supervise(runnable: Runnable, options: SupervisorOptions = {}): Supervisor {
  return new Supervisor(runnable, options);
}
