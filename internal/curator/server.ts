// The curator runnable: leader election, learner promotion and the gRPC
// server with its three services, on top of the local etcd.

import type { Etcd3 } from "etcd3";
import { createPublicKey, type KeyObject, type X509Certificate } from "node:crypto";
import { AAA, ClusterEvent_Kind, Management, Node_Health } from "../../proto/gen/api/management_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { Value } from "../event/mod.ts";
import { UnavailableError, addService, clusterListenLimits, createServer, listen, serverCredentials, type AuditedCall, type CallMeter, type Peer } from "../rpc/mod.ts";
import { admitMember, whenRightsEnd } from "./rights.ts";
import { etcdUnavailable } from "./store.ts";
import { AuditTrail } from "./audit.ts";
import { HealthEvents } from "./health_events.ts";
import { toApiNode } from "./convert.ts";
import type { Logger } from "../log/mod.ts";
import { sleep, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { CURATOR_PORT, HEARTBEAT_TIMEOUT_MS, electionTrailer, formatAddress, leaderTrailer, parseEndpoint } from "./client/mod.ts";
import { handRaftLeadershipAway, holdConsensusJoins, type ConsensusJoinTiming, newConsensusJoins, promoteLearners, reconcileMembership } from "./consensus_membership.ts";
import { CURATOR_CERTIFICATE_VALIDITY_MS, issueOwnCuratorCertificate } from "./curator_certificate.ts";
import { leadershipRunnable, type Leadership } from "./leadership.ts";
import { AAA_POLICY, aaaService } from "./service_aaa.ts";
import { CURATOR_POLICY, curatorService } from "./service_curator.ts";
import { MANAGEMENT_POLICY, managementService } from "./service_management.ts";
import { CuratorStore, ETCD_PREFIX } from "./store.ts";
import { StateCache } from "./state_cache.ts";
import { NodeWatchHub } from "./watch.ts";
import { HeartbeatTracker } from "./heartbeats.ts";
import { kubernetesPKISource } from "./kubernetes_credentials.ts";
/** How often the leader tries to promote etcd learners that caught up. */
export const PROMOTE_INTERVAL_MS = 2_000;
/**
 * How often a learner that has not caught up is tried again. A node's join
 * waits on its promotion, and the next node's join waits on that, so the
 * leader tries right after it adds a learner, and then at this pace.
 */
export const LEARNER_RETRY_MS = 250;

export interface CuratorOptions {
  /** A client of the local etcd member. */
  etcd: Etcd3;
  nodeId: string;
  /** The address to listen on (this node's address, or 0.0.0.0). */
  listenHost: string;
  port?: number;
  /** This node's key: the curator certificate (curator_certificate.ts) is issued for it. */
  privateKey: KeyObject;
  clusterCA: X509Certificate;
  /** How long each curator certificate is valid (renewed at half that); for tests. */
  certificateValidityMs?: number;
  /** Written by the curator: who leads. */
  leadership?: Value<Leadership>;
  /** How long without a heartbeat makes a node timed out (HEARTBEAT_TIMEOUT_MS); for tests. */
  heartbeatTimeoutMs?: number;
  /** How long a learner may take to catch up, and the wait before a new one (consensus_membership.ts); for tests. */
  consensusJoinTiming?: ConsensusJoinTiming;
  /** false: no audit trail (audit.ts); only bench/audit.ts turns it off, to measure what it costs. */
  auditTrail?: boolean;
  /** Told how each call goes: the node's metrics (internal/metrics). */
  meter?: CallMeter;
}

export function curatorRunnable(options: CuratorOptions): Runnable {
  return async (ctx) => {
    const port = options.port ?? CURATOR_PORT;
    const leadership = options.leadership ?? new Value<Leadership>();
    // Every write is fenced on this curator's term as leader (store.ts).
    const store = new CuratorStore(options.etcd.namespace(ETCD_PREFIX), { fence: () => leadership.peek()?.fenceKey });
    const publicKey = createPublicKey(options.privateKey);
    const validity = options.certificateValidityMs ?? CURATOR_CERTIFICATE_VALIDITY_MS;
    // No certificate, no curator: only the cluster's records make this node one.
    const identity = await issueOwnCuratorCertificate(store, publicKey, validity);
    const requireLeader = () => {
      const state = leadership.peek();
      if (state?.isLeader) return;
      const leader = state?.leader;
      if (!leader) throw new UnavailableError("this curator is not the leader, and no leader is elected yet", { trailers: electionTrailer() });
      // The hint lets clients go straight to the leader (client/leader.ts).
      let trailers: Record<string, string> = {};
      try {
        trailers = leaderTrailer(parseEndpoint(`${leader.nodeId}@${leader.address}`));
      } catch {
        // A campaign value that does not parse: refuse without a hint.
      }
      throw new UnavailableError(`this curator is not the leader; the leader is ${leader.nodeId} at ${leader.address}`, { trailers });
    };
    ctx.run("leadership", leadershipRunnable(store.etcd, { nodeId: options.nodeId, address: formatAddress({ host: identity.address, port }) }, leadership));
    // What the leader does besides serving: promote etcd learners that
    // caught up (below), and every PROMOTE_INTERVAL_MS keep etcd's raft
    // leadership on another node (see handRaftLeadershipAway for why; a
    // failed hand-off is retried with the next member as target).
    const whileLeading =
      (step: (logger: Logger, round: number) => Promise<unknown>): Runnable =>
      async (p) => {
        p.signalHealthy();
        for (let round = 0; ; round++) {
          await leadership.waitFor((l) => l.isLeader, { signal: p.signal });
          await step(p.logger, round);
          await sleep(PROMOTE_INTERVAL_MS, p.signal);
        }
      };
    // Bumped when this curator adds an etcd learner: the promoter looks at once.
    const learnerAdded = new Value<number>();
    let learnersAdded = 0;
    ctx.run("promoter", async (p) => {
      p.signalHealthy();
      for (;;) {
        await leadership.waitFor((l) => l.isLeader, { signal: p.signal });
        const seen = learnerAdded.peek();
        const { waiting } = await promoteLearners(options.etcd, p.logger);
        if (waiting > 0) {
          await sleep(LEARNER_RETRY_MS, p.signal);
          continue;
        }
        const idle = new AbortController();
        const signal = AbortSignal.any([p.signal, idle.signal]);
        await Promise.race([sleep(PROMOTE_INTERVAL_MS, signal), learnerAdded.waitFor((n) => n !== seen, { signal })]).catch((err: unknown) => {
          if (p.signal.aborted) throw err;
        });
        idle.abort();
      }
    });
    ctx.run(
      "raft-handoff",
      whileLeading((logger, round) =>
        handRaftLeadershipAway(options.etcd, logger, round).catch((err: unknown) => logger.warn("could not hand etcd raft leadership away", { reason: (err as Error).message })),
      ),
    );

    // Heartbeats count from the moment this curator begins to lead.
    const heartbeats = new HeartbeatTracker(undefined, options.heartbeatTimeoutMs);
    const trail = new AuditTrail(store.etcd, ctx.logger.child("audit"), etcdUnavailable);

    // etcd's members held against the consensus roles, so that a change
    // interrupted halfway converges by itself, and a learner that does not
    // catch up blocks no other join (consensus_membership.ts). What the
    // leader remembers of learners starts again with each term.
    const orphanLearners = new Map<string, number>();
    let joins = newConsensusJoins();
    let joinsTerm: unknown;
    ctx.run(
      "membership",
      whileLeading(async (logger) => {
        try {
          const { nodes } = await store.nodes();
          await reconcileMembership(options.etcd, nodes, logger, orphanLearners, Date.now(), options.nodeId);
          const term = leadership.peek()?.fenceKey;
          if (term !== joinsTerm) [joins, joinsTerm] = [newConsensusJoins(), term];
          const byId = new Map(nodes.map((n) => [n.id, n]));
          const healthy = (id: string) => {
            const record = byId.get(id);
            return record !== undefined && heartbeats.health(id, record.state).health === Node_Health.HEALTHY;
          };
          const changes = await holdConsensusJoins(options.etcd, store, nodes, joins, { healthy, logger, ...(options.consensusJoinTiming ? { timing: options.consensusJoinTiming } : {}) });
          for (const change of changes) {
            const detail =
              change.kind === "given-up"
                ? `etcd learner given up after ${Math.round(change.learnerMs / 1000)} s without catching up (${change.started ? "it started" : "it never started"}): removed so that other nodes can join; the node keeps the consensus role and gets a new learner once it is up, in ${Math.round(change.rejoinInMs / 1000)} s at the earliest`
                : `given a new etcd learner (its last ${change.givenUp === 1 ? "was" : `${change.givenUp} were`} given up)`;
            trail.record({ kind: ClusterEvent_Kind.CONSENSUS, actor: `curator ${options.nodeId}`, nodeId: change.node, detail });
          }
        } catch (err) {
          logger.warn("could not hold etcd's members against the consensus roles", { reason: (err as Error).message });
        }
      }),
    );
    // What the leader sees happen to nodes goes into the audit trail (health_events.ts).
    const seen = new HealthEvents();
    ctx.run(
      "health-events",
      whileLeading(async (logger) => {
        try {
          const looks = (await store.nodes()).nodes.map((record) => {
            const node = toApiNode(record, heartbeats.health(record.id, record.state));
            return { id: record.id, health: Node_Health[node.health] ?? String(node.health), reason: node.healthReason, bootMs: record.status?.bootMs ?? 0n };
          });
          for (const event of seen.observe(looks)) trail.record({ ...event, actor: `curator ${options.nodeId}` });
        } catch (err) {
          logger.warn("could not look at the nodes for the audit trail", { reason: (err as Error).message });
        }
      }),
    );
    ctx.run("heartbeat-terms", async (t) => {
      t.signalHealthy();
      for (;;) {
        await leadership.waitFor((l) => l.isLeader, { signal: t.signal });
        heartbeats.newTerm();
        seen.reset();
        t.logger.info("leading: node health is UNKNOWN until nodes reach this curator", { graceMs: options.heartbeatTimeoutMs ?? HEARTBEAT_TIMEOUT_MS });
        await leadership.waitFor((l) => !l.isLeader, { signal: t.signal });
      }
    });

    // Reads come from memory, proven current by revision (state_cache.ts).
    // The copy is loaded once the first election is decided, not beside it:
    // on a one-vCPU VM its load and watch delayed the campaign by about a
    // second, and until it is there reads go to etcd, as they would anyway.
    const state = new StateCache(options.etcd);
    const cacheRun = state.runnable();
    let cacheStarted = false;
    ctx.run("state-cache", async (c) => {
      if (!cacheStarted) await leadership.waitFor((l) => l.isLeader || l.leader !== undefined, { signal: c.signal });
      cacheStarted = true;
      await cacheRun(c);
    });
    const server = createServer();
    const watches = new NodeWatchHub(store);
    const serveOptions = {
      ...(options.auditTrail === false ? {} : { audit: (call: AuditedCall) => trail.tap(call) }),
      ...(options.meter ? { meter: options.meter } : {}),
      ca: () => options.clusterCA,
      onError: (method: string, err: unknown) => ctx.logger.debug("call failed", { method, error: String(err) }),
      mapError: etcdUnavailable,
      admit: (peer: Peer, signal: AbortSignal) => admitMember(state, peer, signal),
      revoked: (peer: Peer, signal: AbortSignal) => whenRightsEnd(watches, peer, signal),
    };
    addService(server, AAA, aaaService(state), { ...serveOptions, policy: AAA_POLICY });
    const onLearnerAdded = () => learnerAdded.set(++learnersAdded);
    const kubernetesPKI = kubernetesPKISource(options.etcd);
    addService(
      server,
      Management,
      managementService({ store, state, etcd: options.etcd, requireLeader, leader: () => leadership.peek()?.leader?.nodeId, heartbeats, logger: ctx.logger, onLearnerAdded, kubernetesPKI }),
      {
        ...serveOptions,
        policy: MANAGEMENT_POLICY,
      },
    );
    addService(server, Curator, curatorService({ store, state, watches, requireLeader, heartbeats, logger: ctx.logger, kubernetesPKI, trail }), { ...serveOptions, policy: CURATOR_POLICY });
    const address = formatAddress({ host: options.listenHost, port });
    const credentials = serverCredentials({ certificate: identity.certificate, privateKey: options.privateKey });
    try {
      await listen(
        server,
        address,
        credentials,
        clusterListenLimits(() => options.clusterCA),
      );
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${address}: ${(err as Error).message}`, { cause: err });
    }
    ctx.logger.info("curator serving", { address, certifiedFor: identity.address, validUntil: identity.certificate.validTo });
    ctx.signalHealthy();
    // Renew the certificate at half its life, for as long as the records
    // keep this node a consensus member; without the role, stop serving.
    const renew = async (): Promise<never> => {
      for (;;) {
        await sleep(validity / 2, ctx.signal);
        const next = await issueOwnCuratorCertificate(store, publicKey, validity);
        credentials.rotate({ certificate: next.certificate, privateKey: options.privateKey });
        ctx.logger.info("curator certificate renewed", { validUntil: next.certificate.validTo });
      }
    };
    try {
      await Promise.race([untilCancelled(ctx.signal), renew()]);
    } finally {
      server.forceShutdown();
    }
  };
}
