// Node watches, fanned out: one etcd watch per curator, however many
// callers watch, and every caller gets the backlog of current records, a
// marker, then changes as etcd reports them.
//
//   etcd ──one watch (nodes/ prefix)──▶ NodeWatchHub ── records (Map, by ID)
//                                            │ put/delete, in etcd order
//                        ┌───────────────────┼───────────────────┐
//                        ▼                   ▼                   ▼
//                   subscriber          subscriber          subscriber
//             (backlog from the map, then its own bounded queue of events)
//
// The hub starts with its first subscriber and stops with its last, so an
// idle curator holds no records and no etcd watch. A subscriber whose queue
// overflows (a reader that stopped reading) is ended with
// RESOURCE_EXHAUSTED and may watch again; it never holds memory hostage.
// When the etcd watch fails or is interrupted, every subscriber ends with
// UNAVAILABLE (and watches again). Each event is one object for all its
// subscribers, so what the service makes of it can be made once.

import { fromBinary } from "@bufbuild/protobuf";
import type { Watcher } from "etcd3";
import { NodeRecordSchema, type NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import { ResourceExhaustedError, UnavailableError } from "../rpc/mod.ts";
import { NODES_PREFIX, type CuratorStore } from "./store.ts";

export type NodeEvent = { kind: "backlog"; nodes: NodeRecord[] } | { kind: "backlog-end" } | { kind: "put"; node: NodeRecord } | { kind: "delete"; nodeId: string };

/** Concurrent watchers one curator serves; more are refused with RESOURCE_EXHAUSTED. */
export const MAX_WATCHERS = 10_000;
/** Events queued for one watcher that is not reading; past this it is ended. */
export const MAX_QUEUED_EVENTS = 1_000;

interface Subscriber {
  nodeId: string | undefined;
  queue: NodeEvent[];
  failure?: Error;
  wake?: (() => void) | undefined;
}

interface Running {
  records: Map<string, NodeRecord>;
  watcher: Watcher;
}

export class NodeWatchHub {
  readonly #store: CuratorStore;
  readonly #limits: { maxWatchers: number; maxQueuedEvents: number };
  readonly #subscribers = new Set<Subscriber>();
  #running: Running | undefined;
  #starting: Promise<Running> | undefined;

  constructor(store: CuratorStore, limits: { maxWatchers?: number; maxQueuedEvents?: number } = {}) {
    this.#store = store;
    this.#limits = { maxWatchers: limits.maxWatchers ?? MAX_WATCHERS, maxQueuedEvents: limits.maxQueuedEvents ?? MAX_QUEUED_EVENTS };
  }

  /** How many callers watch now. */
  get watchers(): number {
    return this.#subscribers.size;
  }

  /** Whether the hub holds an etcd watch now. */
  get watching(): boolean {
    return this.#running !== undefined;
  }

  /** Follows node records (all, or one by ID) until `signal` aborts. */
  async *subscribe(filter: { nodeId?: string }, signal: AbortSignal): AsyncIterable<NodeEvent> {
    if (this.#subscribers.size >= this.#limits.maxWatchers) {
      throw new ResourceExhaustedError(`this curator already serves ${this.#limits.maxWatchers} watchers; try again later or another curator`);
    }
    const subscriber: Subscriber = { nodeId: filter.nodeId, queue: [] };
    this.#subscribers.add(subscriber);
    const onAbort = () => subscriber.wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      const running = await this.#start();
      // Synchronous from here to the yield: the backlog and the queue meet
      // exactly, with no event in between missed or seen twice.
      const backlog = [...running.records.values()].filter((n) => matches(subscriber, n.id)).sort((a, b) => a.id.localeCompare(b.id));
      yield { kind: "backlog", nodes: backlog };
      yield { kind: "backlog-end" };
      for (;;) {
        while (subscriber.queue.length > 0) yield subscriber.queue.shift()!;
        if (subscriber.failure) throw subscriber.failure;
        if (signal.aborted) return;
        await new Promise<void>((resolve) => (subscriber.wake = resolve));
        subscriber.wake = undefined;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
      this.#subscribers.delete(subscriber);
      if (this.#subscribers.size === 0) await this.#stop();
    }
  }

  #start(): Promise<Running> {
    if (this.#running) return Promise.resolve(this.#running);
    this.#starting ??= this.#open()
      .catch((err: unknown) => {
        throw new UnavailableError(`the curator could not read the nodes from etcd: ${(err as Error).message}`, { cause: err });
      })
      .finally(() => (this.#starting = undefined));
    return this.#starting;
  }

  async #open(): Promise<Running> {
    const { nodes, revision } = await this.#store.nodes();
    const records = new Map(nodes.map((n) => [n.id, n]));
    // Listeners go on before the watch is created: events can follow its
    // creation at once, before a promise of it would resolve.
    const watcher = this.#store.etcd
      .watch()
      .prefix(NODES_PREFIX)
      .startRevision(String(BigInt(revision) + 1n))
      .watcher();
    const running: Running = { records, watcher };
    watcher.on("put", (kv) => {
      if (this.#running !== running) return;
      const node = fromBinary(NodeRecordSchema, kv.value);
      records.set(node.id, node);
      this.#publish({ kind: "put", node }, node.id);
    });
    watcher.on("delete", (kv) => {
      if (this.#running !== running) return;
      const key = kv.key.toString();
      const nodeId = key.slice(key.lastIndexOf("/") + 1);
      records.delete(nodeId);
      this.#publish({ kind: "delete", nodeId }, nodeId);
    });
    const end = (why: string) => {
      const failure = new UnavailableError(`the curator lost its etcd watch: ${why}; watch again`);
      for (const subscriber of this.#subscribers) fail(subscriber, failure);
      if (this.#running === running) this.#running = undefined;
      watcher.cancel().catch(() => {});
    };
    watcher.on("error", (err) => end(err.message));
    // etcd3 would resume an interrupted watch from the last revision in a
    // response header, which can be past events it never delivered: end it
    // instead, and let every watcher start again from a fresh backlog.
    watcher.on("disconnected", (err: Error) => end(`interrupted (${err.message})`));
    this.#running = running;
    await new Promise<void>((resolve, reject) => {
      watcher.once("connected", () => resolve());
      watcher.once("error", reject);
      watcher.once("disconnected", reject);
    });
    return running;
  }

  #publish(event: NodeEvent, nodeId: string): void {
    for (const subscriber of this.#subscribers) {
      if (!matches(subscriber, nodeId) || subscriber.failure) continue;
      if (subscriber.queue.length >= this.#limits.maxQueuedEvents) {
        subscriber.queue.length = 0;
        fail(subscriber, new ResourceExhaustedError(`this watcher fell ${this.#limits.maxQueuedEvents} events behind; watch again`));
        continue;
      }
      subscriber.queue.push(event);
      subscriber.wake?.();
    }
  }

  async #stop(): Promise<void> {
    // A subscriber may arrive while the watch is still being opened: let it finish first.
    await this.#starting?.catch(() => {});
    const running = this.#running;
    if (!running || this.#subscribers.size > 0) return;
    this.#running = undefined;
    await running.watcher.cancel().catch(() => {});
  }
}

function matches(subscriber: Subscriber, nodeId: string): boolean {
  return subscriber.nodeId === undefined || subscriber.nodeId === nodeId;
}

function fail(subscriber: Subscriber, failure: Error): void {
  subscriber.failure ??= failure;
  subscriber.wake?.();
}
