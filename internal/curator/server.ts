// The curator runnable: leader election, learner promotion and the gRPC
// server with its three services, on top of the local etcd.

import { Server } from "@grpc/grpc-js";
import type { Etcd3 } from "etcd3";
import type { KeyObject, X509Certificate } from "node:crypto";
import { AAA, Management } from "../../proto/gen/api/management_pb.ts";
import { Curator } from "../../proto/gen/curator/curator_pb.ts";
import { Value } from "../event/mod.ts";
import { UnavailableError, addService, serverCredentials } from "../rpc/mod.ts";
import { sleep, untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { promoteLearners } from "./consensus_membership.ts";
import { leadershipRunnable, type Leadership } from "./leadership.ts";
import { AAA_POLICY, aaaService } from "./service_aaa.ts";
import { CURATOR_POLICY, curatorService } from "./service_curator.ts";
import { MANAGEMENT_POLICY, managementService } from "./service_management.ts";
import { CuratorStore, ETCD_PREFIX } from "./store.ts";

/** The port every curator listens on. */
export const CURATOR_PORT = 7835;
/** How often the leader tries to promote etcd learners that caught up. */
export const PROMOTE_INTERVAL_MS = 2_000;

export interface CuratorOptions {
  /** A client of the local etcd member. */
  etcd: Etcd3;
  nodeId: string;
  /** The address to listen on (this node's address, or 0.0.0.0). */
  listenHost: string;
  /** The address other nodes reach this curator at. */
  advertiseAddress: string;
  port?: number;
  /** This node's certificate under the cluster CA, and its key. */
  certificate: X509Certificate;
  privateKey: KeyObject;
  clusterCA: X509Certificate;
  /** Written by the curator: who leads. */
  leadership?: Value<Leadership>;
}

function bind(server: Server, address: string, credentials: ReturnType<typeof serverCredentials>): Promise<number> {
  return new Promise((resolve, reject) => server.bindAsync(address, credentials, (err, port) => (err ? reject(err) : resolve(port))));
}

export function curatorRunnable(options: CuratorOptions): Runnable {
  return async (ctx) => {
    const port = options.port ?? CURATOR_PORT;
    const store = new CuratorStore(options.etcd.namespace(ETCD_PREFIX));
    const leadership = options.leadership ?? new Value<Leadership>();
    const requireLeader = () => {
      const state = leadership.peek();
      if (state?.isLeader) return;
      const leader = state?.leader;
      throw new UnavailableError(
        leader ? `this curator is not the leader; the leader is ${leader.nodeId} at ${leader.address}` : "this curator is not the leader, and no leader is elected yet",
      );
    };
    ctx.run("leadership", leadershipRunnable(store.etcd, { nodeId: options.nodeId, address: `${options.advertiseAddress}:${port}` }, leadership));
    ctx.run("promoter", async (p) => {
      p.signalHealthy();
      for (;;) {
        await leadership.waitFor((l) => l.isLeader, { signal: p.signal });
        await promoteLearners(options.etcd, p.logger);
        await sleep(PROMOTE_INTERVAL_MS, p.signal);
      }
    });

    const server = new Server({ "grpc.max_receive_message_length": 4 * 1024 * 1024 });
    const serveOptions = { ca: () => options.clusterCA, onError: (method: string, err: unknown) => ctx.logger.debug("call failed", { method, error: String(err) }) };
    addService(server, AAA, aaaService(store), { ...serveOptions, policy: AAA_POLICY });
    addService(server, Management, managementService({ store, etcd: options.etcd, requireLeader, logger: ctx.logger }), {
      ...serveOptions,
      policy: MANAGEMENT_POLICY,
    });
    addService(server, Curator, curatorService({ store, requireLeader, logger: ctx.logger }), { ...serveOptions, policy: CURATOR_POLICY });
    const address = `${options.listenHost.includes(":") ? `[${options.listenHost}]` : options.listenHost}:${port}`;
    try {
      await bind(server, address, serverCredentials({ certificate: options.certificate, privateKey: options.privateKey }));
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${address}: ${(err as Error).message}`, { cause: err });
    }
    ctx.logger.info("curator serving", { address });
    ctx.signalHealthy();
    try {
      await untilCancelled(ctx.signal);
    } finally {
      server.forceShutdown();
    }
  };
}
