// Node watches: the backlog of current records, a marker, then changes as
// etcd reports them, as an async iterable that ends when the signal aborts.

import { fromBinary } from "@bufbuild/protobuf";
import { NodeRecordSchema, type NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import { NODES_PREFIX, type CuratorStore } from "./store.ts";

export type NodeEvent =
  | { kind: "backlog"; nodes: NodeRecord[] }
  | { kind: "backlog-end" }
  | { kind: "put"; node: NodeRecord }
  | { kind: "delete"; nodeId: string };

/** Follows node records (all, or one by ID) until `signal` aborts. */
export async function* watchNodes(store: CuratorStore, filter: { nodeId?: string }, signal: AbortSignal): AsyncIterable<NodeEvent> {
  const { nodes, revision } = await store.nodes();
  const matches = (id: string) => filter.nodeId === undefined || filter.nodeId === id;
  yield { kind: "backlog", nodes: nodes.filter((n) => matches(n.id)) };
  yield { kind: "backlog-end" };

  const queue: NodeEvent[] = [];
  let wake: (() => void) | undefined;
  let failure: Error | undefined;
  const push = (event: NodeEvent) => {
    queue.push(event);
    wake?.();
  };
  const builder = filter.nodeId === undefined ? store.etcd.watch().prefix(NODES_PREFIX) : store.etcd.watch().key(NODES_PREFIX + filter.nodeId);
  const watcher = await builder.startRevision(String(BigInt(revision) + 1n)).create();
  watcher.on("put", (kv) => push({ kind: "put", node: fromBinary(NodeRecordSchema, kv.value) }));
  watcher.on("delete", (kv) => push({ kind: "delete", nodeId: kv.key.toString().slice(kv.key.toString().lastIndexOf("/") + 1) }));
  watcher.on("error", (err) => {
    failure = err;
    wake?.();
  });
  const onAbort = () => wake?.();
  signal.addEventListener("abort", onAbort);
  try {
    for (;;) {
      while (queue.length > 0) yield queue.shift()!;
      if (failure) throw new Error(`etcd watch failed: ${failure.message}`, { cause: failure });
      if (signal.aborted) return;
      await new Promise<void>((resolve) => (wake = resolve));
      wake = undefined;
    }
  } finally {
    signal.removeEventListener("abort", onAbort);
    await watcher.cancel().catch(() => {});
  }
}
