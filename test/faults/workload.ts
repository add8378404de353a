// The fault suite's workload: owner clients, each with its own CuratorPool,
// writing unique label values on one node and reading them back through the
// owner API (UpdateNodeLabels, GetNodes), every operation recorded
// (history.ts). The same code drives a cluster of processes and one of VMs.
//
//   client i, run r:  write r<r>-c<i>-k<j> = r<r>-c<i>-<n>   (j = n mod KEYS_PER_CLIENT)
//                     every second op: read every key of its own
//
// Each run has keys of its own, so a run's history can be checked on its
// own once the clients have moved on to the next run's keys (the per-fault
// figures come from that), and the labels of a run that has been checked
// are removed again (a node has at most 64 labels).

import { Management } from "../../proto/gen/api/management_pb.ts";
import { CuratorPool, NoCuratorError, type CuratorClientOf, type CuratorEndpoint } from "../../internal/curator/client/mod.ts";
import type { KeyObject, X509Certificate } from "node:crypto";
import { RpcError, Status } from "../../internal/rpc/mod.ts";
import { HistoryRecorder, tally, type Op } from "./history.ts";

/** Owner clients writing and reading at once. */
export const CLIENTS = 3;
/** Keys each client writes in a run (each a register). */
const KEYS_PER_CLIENT = 3;
/** Each call's deadline among processes on the host (an owner write there takes milliseconds). */
export const CALL_TIMEOUT_MS = 2_000;
/**
 * Each call's deadline in a cluster of VMs under TCG: an owner write takes
 * about 1.8 s there (seed 11's run, 2026-11-26: median of the acknowledged
 * ones), so 2 s left most writes unknown and the check with little to
 * check (9 acknowledged in a run).
 */
export const QEMU_CALL_TIMEOUT_MS = 10_000;

export interface OwnerAccess {
  ca: X509Certificate;
  certificate: X509Certificate;
  privateKey: KeyObject;
  endpoints: CuratorEndpoint[];
}

/** Whether one curator's answer proves the call did not take effect there. */
function refusedBeforeEffect(err: unknown): boolean {
  if (!(err instanceof RpcError)) return false;
  if (err.code === Status.UNAVAILABLE) return /not the leader|write was not made/.test(err.details);
  return err.code === Status.INVALID_ARGUMENT || err.code === Status.NOT_FOUND || err.code === Status.FAILED_PRECONDITION || err.code === Status.PERMISSION_DENIED;
}

/**
 * failed: provably did not take effect (every curator tried either never
 * got the call, or refused it before writing); unknown: anything else, such
 * as a deadline or a connection lost mid-call.
 */
export function classify(err: unknown): "failed" | "unknown" {
  if (refusedBeforeEffect(err)) return "failed";
  if (err instanceof NoCuratorError) {
    const neverSent = new Set(["refused", "unreachable", "timeout", "untrusted", "identity", "failed"]);
    return err.failures.every((f) => neverSent.has(f.kind) || refusedBeforeEffect(f.error)) ? "failed" : "unknown";
  }
  return "unknown";
}

export const keyPrefix = (run: number) => `r${run}-`;

export class Workload {
  readonly history = new HistoryRecorder();
  /** When each acknowledged write was invoked. */
  readonly acked: number[] = [];
  private run = 0;
  /** The run each client's current operation belongs to. */
  private readonly clientRun: number[] = Array.from({ length: CLIENTS }, () => 0);
  private stopping = false;
  private readonly pools: CuratorPool[];
  private readonly clients: Promise<void>[];

  constructor(
    private readonly owner: OwnerAccess,
    /** The node whose labels are written. */
    readonly target: string,
    /** Each call's deadline (CALL_TIMEOUT_MS, QEMU_CALL_TIMEOUT_MS). */
    readonly callTimeoutMs = CALL_TIMEOUT_MS,
  ) {
    this.pools = Array.from({ length: CLIENTS }, () => new CuratorPool({ ca: owner.ca, certificate: owner.certificate, privateKey: owner.privateKey }));
    this.clients = Array.from({ length: CLIENTS }, (_, i) => this.client(i));
  }

  /** One pool for the runner's own calls (health, cleanup). */
  get pool(): CuratorPool {
    return this.pools[0]!;
  }

  call<T>(fn: (m: CuratorClientOf<typeof Management>) => Promise<T>): Promise<T> {
    return this.pool.call(Management, this.owner.endpoints, fn);
  }

  /** Moves the clients on to run `run`'s keys; resolves once no client works on an earlier run. */
  async beginRun(run: number): Promise<void> {
    this.run = run;
    while (!this.stopping && this.clientRun.some((r) => r < run)) await Bun.sleep(20);
  }

  /** The operations of run `run`. */
  opsOf(run: number): Op[] {
    return this.history.ops.filter((o) => o.key.startsWith(keyPrefix(run)));
  }

  /** Removes the labels of a run that has been checked (retried: the cluster may still be electing). */
  async removeLabels(run: number): Promise<void> {
    const keys = [...new Set(this.opsOf(run).map((o) => o.key))];
    if (keys.length === 0) return;
    for (let attempt = 0; attempt < 20; attempt++) {
      try {
        await this.call((m) => m.updateNodeLabels({ id: this.target, delete: keys }, { timeoutMs: this.callTimeoutMs }));
        return;
      } catch {
        await Bun.sleep(500);
      }
    }
  }

  async stop(): Promise<void> {
    this.stopping = true;
    await Promise.all(this.clients);
    for (const pool of this.pools) pool.close();
  }

  /** What the clients' calls invoked from `since` on came to, in one line (history.ts tally). */
  tally(since = 0): string {
    return tally(this.history.ops, since);
  }

  private async client(i: number): Promise<void> {
    // Let the constructor finish before the first call.
    await Promise.resolve();
    for (let n = 0; !this.stopping; n++) {
      const run = this.run;
      this.clientRun[i] = run;
      const keys = Array.from({ length: KEYS_PER_CLIENT }, (_, j) => `${keyPrefix(run)}c${i}-k${j}`);
      const key = keys[n % keys.length]!;
      const value = `${keyPrefix(run)}c${i}-${n}`;
      const invoked = performance.now();
      const result = await this.history.write(
        i,
        key,
        value,
        () => this.pools[i]!.call(Management, this.owner.endpoints, (m) => m.updateNodeLabels({ id: this.target, upsert: [{ key, value }] }, { timeoutMs: this.callTimeoutMs })).then(() => {}),
        classify,
      );
      if (result === "ok") this.acked.push(invoked);
      if (n % 2 === 1) {
        await this.history.read(
          i,
          keys,
          () =>
            this.pools[i]!.call(Management, this.owner.endpoints, async (m) => {
              for await (const node of m.getNodes({}, { timeoutMs: this.callTimeoutMs })) {
                if (node.id === this.target) return new Map(node.labels.map((l) => [l.key, l.value]));
              }
              throw new Error(`node ${this.target} is not listed`);
            }),
          classify,
        );
      }
      if (result !== "ok") await Bun.sleep(50);
    }
  }
}
