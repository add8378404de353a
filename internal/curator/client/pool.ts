// A pool of curator clients that knows who leads.
//
//   call(service, endpoints, fn)
//     1. connect to every candidate at once (each within the connect deadline,
//        longer for a host that is up but slow to handshake: patience.ts);
//        the remembered leader is first in line
//     2. take candidates as their connections settle, the leader first among
//        those that have: a dead curator never holds up a live one
//     3. fn(client) on a connected, verified curator:
//          ok                        → remember it as the leader; done
//          UNAVAILABLE + leader hint → go to the hinted curator next, and
//                                      remember it as the leader
//          UNAVAILABLE / DEADLINE    → next candidate; forget it as leader
//          anything else             → final, returned to the caller
//     4. none answered → NoCuratorError, saying what happened at each
//        (failover.ts words it; why a connection failed is read from
//        grpc-js as it fails: lastConnectionFailure); unless one said that
//        no curator leads yet (an election under way: the call was refused
//        before anything was done), then all of it again, every
//        ELECTION_RETRY_MS, for up to ELECTION_PATIENCE_MS
//
// Clients stay open between calls (keepalive and reconnect backoff: dial.ts),
// so a long-lived caller such as the role server pays for a connection once
// and calls the leader directly. `retain` closes clients of curators that
// are no longer candidates; `close` closes all. callAnyCurator is the
// one-shot form, for callers such as ctl.

import type { DescService } from "@bufbuild/protobuf";
import { RpcError, type CallOptions } from "../../rpc/mod.ts";
import { dialCurator, type CuratorClientOf, type DialCredentials } from "./dial.ts";
import { formatEndpoint, sameAddress, type CuratorEndpoint } from "./endpoint.ts";
import {
  CONNECT_TIMEOUT_MS,
  NoCuratorError,
  answerFailure,
  connectFailure,
  unavailableOrDeadline,
  type ConnectOutcome,
  type ConnectionFailure,
  type CuratorFailure,
  type FailoverOptions,
} from "./failover.ts";
import { electionUnderWay, leaderHintOf } from "./leader.ts";
import { CONNECT_PATIENCE_MS, connectPatiently } from "./patience.ts";

/**
 * How long lastConnectionFailure waits for its call to fail. A channel that
 * has just failed fails calls at once; the bound is only there so that a
 * call that was queued instead (which the comment there rules out) could not
 * wait for a connection.
 */
const FAILURE_READ_TIMEOUT_MS = 100;

/**
 * How long a call waits out an election, and how often it asks again: a
 * new cluster's first seconds and every failover have a window in which a
 * curator answers but none leads (ctl node approve right after a
 * bootstrap failed in it under load). The window is one campaign's round
 * trips: a term that ends leaves its key (the dead leader is named, not an
 * election) until the lease expires, and the next in line is elected as it
 * goes. 15 s of it, and the call gives up as before.
 */
export const ELECTION_PATIENCE_MS = 15_000;
const ELECTION_RETRY_MS = 500;

interface Attempt<S> {
  endpoint: CuratorEndpoint;
  client: CuratorClientOf<S>;
  connecting: Promise<{ result: "ready" } | ConnectOutcome>;
  settled?: { result: "ready" } | ConnectOutcome;
}

export class CuratorPool {
  private readonly clients = new Map<string, { endpoint: CuratorEndpoint; client: CuratorClientOf<DescService> }>();
  private preferred: CuratorEndpoint | undefined;

  constructor(
    private readonly credentials: DialCredentials,
    private readonly options: { connectTimeoutMs?: number; connectPatienceMs?: number } = {},
  ) {}

  /** The curator calls go to first: the one that last answered, or that followers named as leader. */
  get leader(): CuratorEndpoint | undefined {
    return this.preferred;
  }

  /** Runs `call` on the curators, leader first, until one succeeds, waiting out an election; see the file comment. */
  async call<S extends DescService, T>(
    service: S,
    endpoints: readonly CuratorEndpoint[],
    call: (client: CuratorClientOf<S>, endpoint: CuratorEndpoint) => Promise<T>,
    options: FailoverOptions = {},
  ): Promise<T> {
    const giveUpAt = performance.now() + (options.electionPatienceMs ?? ELECTION_PATIENCE_MS);
    for (let round = 0; ; round++) {
      try {
        return await this.callOnce(service, endpoints, call, options);
      } catch (err) {
        const electing = err instanceof NoCuratorError && err.failures.some((f) => electionUnderWay(f.error));
        if (!electing || performance.now() + ELECTION_RETRY_MS > giveUpAt) throw err;
        if (round === 0) options.progress?.("no curator leads yet (an election is under way); asking again ...");
        await Bun.sleep(ELECTION_RETRY_MS);
      }
    }
  }

  /** One round: each curator once (and a hinted leader); see the file comment. */
  private async callOnce<S extends DescService, T>(
    service: S,
    endpoints: readonly CuratorEndpoint[],
    call: (client: CuratorClientOf<S>, endpoint: CuratorEndpoint) => Promise<T>,
    options: FailoverOptions,
  ): Promise<T> {
    const connectTimeoutMs = options.connectTimeoutMs ?? this.options.connectTimeoutMs ?? CONNECT_TIMEOUT_MS;
    const patienceMs = Math.max(options.connectPatienceMs ?? this.options.connectPatienceMs ?? CONNECT_PATIENCE_MS, connectTimeoutMs);
    const tryNext = options.tryNextAfter ?? unavailableOrDeadline;
    const attempts = new Map<string, Attempt<S>>();
    const start = (endpoint: CuratorEndpoint): Attempt<S> => {
      const key = formatEndpoint(endpoint);
      let attempt = attempts.get(key);
      if (!attempt) {
        const client = this.client(service, endpoint);
        const busy = () => options.progress?.(`${formatEndpoint(endpoint)} accepts connections but is slow to finish the TLS handshake; waiting for it ...`);
        const connecting = connectPatiently((ms) => client.connect(ms), endpoint, connectTimeoutMs, patienceMs, busy).then(async (outcome): Promise<{ result: "ready" } | ConnectOutcome> => {
          if (outcome.result !== "failed") return outcome;
          const result = outcome.result;
          // Read why in this same turn of the event loop, while the channel is still failed.
          const identityProblem = client.identityProblem();
          if (identityProblem !== undefined) return { result, identityProblem };
          return { result, failure: await lastConnectionFailure(service, client) };
        });
        const created: Attempt<S> = { endpoint, client, connecting };
        created.connecting.then((result) => (created.settled = result));
        attempts.set(key, (attempt = created));
      }
      return attempt;
    };
    for (const endpoint of this.ordered(endpoints)) start(endpoint);

    const failures: CuratorFailure[] = [];
    const tried = new Set<Attempt<S>>();
    let hinted: Attempt<S> | undefined;
    for (;;) {
      const untried = [...attempts.values()].filter((a) => !tried.has(a));
      if (untried.length === 0) break;
      const next = hinted && !tried.has(hinted) ? hinted : untried.find((a) => a.settled !== undefined);
      if (!next) {
        await Promise.race(untried.map((a) => a.connecting));
        continue;
      }
      hinted = undefined;
      tried.add(next);
      const { endpoint, client } = next;
      options.progress?.(`calling ${formatEndpoint(endpoint)} ...`);
      const connected = await next.connecting;
      const identity = client.identityProblem();
      if (identity !== undefined) {
        failures.push({ endpoint, kind: "identity", reason: identity });
        this.drop(endpoint);
        continue;
      }
      if (connected.result !== "ready") {
        failures.push(connectFailure(endpoint, connected));
        this.forgetLeader(endpoint);
        continue;
      }
      const calledAt = performance.now();
      try {
        const result = await call(client, endpoint);
        this.preferred = endpoint;
        return result;
      } catch (err) {
        if (!tryNext(err)) throw err;
        failures.push(answerFailure(endpoint, err, performance.now() - calledAt));
        this.forgetLeader(endpoint);
        const hint = leaderHintOf(err);
        if (hint) {
          // Dial the hinted curator as the candidate at that address (or as
          // a new one); it must prove to be that node's curator either way.
          const known = [...attempts.values()].find((a) => sameAddress(a.endpoint, hint) && (!a.endpoint.nodeId || a.endpoint.nodeId === hint.nodeId));
          hinted = known ?? start(hint);
          if (!tried.has(hinted)) this.preferred = hinted.endpoint;
        }
      }
    }
    throw new NoCuratorError(failures);
  }

  /** Closes the clients of curators not in `endpoints`. */
  retain(endpoints: readonly CuratorEndpoint[]): void {
    const keep = new Set(endpoints.map(formatEndpoint));
    for (const [key, { endpoint, client }] of this.clients) {
      if (keep.has(formatEndpoint(endpoint))) continue;
      client.close();
      this.clients.delete(key);
    }
    if (this.preferred && !keep.has(formatEndpoint(this.preferred))) this.preferred = undefined;
  }

  close(): void {
    for (const { client } of this.clients.values()) client.close();
    this.clients.clear();
  }

  /** The candidates with the remembered leader first. */
  private ordered(endpoints: readonly CuratorEndpoint[]): CuratorEndpoint[] {
    const leader = this.preferred;
    if (!leader) return [...endpoints];
    const key = formatEndpoint(leader);
    const known = endpoints.some((e) => formatEndpoint(e) === key);
    return known ? [leader, ...endpoints.filter((e) => formatEndpoint(e) !== key)] : [...endpoints];
  }

  private forgetLeader(endpoint: CuratorEndpoint): void {
    if (this.preferred && formatEndpoint(this.preferred) === formatEndpoint(endpoint)) this.preferred = undefined;
  }

  private client<S extends DescService>(service: S, endpoint: CuratorEndpoint): CuratorClientOf<S> {
    const key = `${service.typeName} ${formatEndpoint(endpoint)}`;
    let entry = this.clients.get(key);
    if (!entry) {
      entry = { endpoint, client: dialCurator(service, endpoint, this.credentials) as CuratorClientOf<DescService> };
      this.clients.set(key, entry);
    }
    return entry.client as unknown as CuratorClientOf<S>;
  }

  /** Closes every client of `endpoint` (a curator that failed its identity check is dialled afresh next time). */
  private drop(endpoint: CuratorEndpoint): void {
    this.forgetLeader(endpoint);
    const suffix = ` ${formatEndpoint(endpoint)}`;
    for (const [key, { client }] of this.clients) {
      if (!key.endsWith(suffix)) continue;
      client.close();
      this.clients.delete(key);
    }
  }
}

/**
 * Why `client` failed to connect, as grpc-js recorded it. grpc-js keeps the
 * last connection error only in the picker of a channel in
 * TRANSIENT_FAILURE, and tells it only to calls: as the details of the
 * UNAVAILABLE status of a call that it fails at once (no waitForReady). So
 * this starts one unary call and reads that status
 * (RpcError.connectionFailure). The call never leaves the process: it is
 * started as the connection attempt settles and picked in the same turn of
 * the event loop (grpc-js gets there through promises and nextTicks, no
 * I/O), and a failed channel stays failed (sticky TRANSIENT_FAILURE) until a
 * new connection is up, which takes I/O, after a reconnect backoff.
 */
async function lastConnectionFailure<S extends DescService>(service: S, client: CuratorClientOf<S>): Promise<ConnectionFailure | undefined> {
  // Only a read (Management's Get* calls, which the owner may make anyway),
  // so that even a call that did leave the process would change nothing.
  // Services without one (Curator, AAA) get the generic "connection failed".
  const method = service.methods.find((m) => m.methodKind === "unary" && m.name.startsWith("Get"));
  if (!method) return undefined;
  const call = (client as unknown as Record<string, (request: object, options: CallOptions) => Promise<unknown>>)[method.localName];
  if (!call) return undefined;
  try {
    await call({}, { timeoutMs: FAILURE_READ_TIMEOUT_MS });
    return undefined;
  } catch (err) {
    return err instanceof RpcError ? err.connectionFailure : undefined;
  }
}

/**
 * Runs `call` on the curators until one succeeds (pool.ts), with clients
 * that are closed when it returns: for one-shot callers such as ctl.
 */
export async function callAnyCurator<S extends DescService, T>(
  service: S,
  endpoints: readonly CuratorEndpoint[],
  credentials: DialCredentials,
  call: (client: CuratorClientOf<S>, endpoint: CuratorEndpoint) => Promise<T>,
  options: FailoverOptions = {},
): Promise<T> {
  const pool = new CuratorPool(credentials);
  try {
    return await pool.call(service, endpoints, call, options);
  } finally {
    pool.close();
  }
}
