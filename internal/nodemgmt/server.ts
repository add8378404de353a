// The node management runnable: serves NodeManagement on the node's address
// with the node's own certificate, once the node is part of a cluster; and,
// on the same port, GET /metrics to the owner and metrics readers
// (internal/metrics).

import type { MessageInitShape } from "@bufbuild/protobuf";
import { NodeManagement } from "../../proto/gen/api/node_management_pb.ts";
import type { ReportNodeManagementCallRequestSchema } from "../../proto/gen/curator/curator_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import type { Value } from "../event/mod.ts";
import { metricsHandler, type NodeMetrics, type ScrapeRefusal } from "../metrics/mod.ts";
import { actorOf, addService, callResult, clusterListenLimits, createServer, describeRequest, hostPort, isRefusal, listen, serverCredentials, type AuditedCall } from "../rpc/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { NODE_MANAGEMENT_PORT } from "./client/mod.ts";
import { NODE_MANAGEMENT_POLICY, nodeManagementService, type NodeManagementDeps } from "./service.ts";

export interface NodeManagementOptions extends NodeManagementDeps {
  membership: Value<ClusterMembership>;
  port?: number;
  /** Told of each call that changes the node (REPORTED) and each refusal, for the cluster's audit trail (the curator records it). */
  report?: (call: NodeManagementCall) => void;
  /** The node's metrics: served at /metrics, and told how each call here goes. */
  metrics?: NodeMetrics;
}

/** A node management call as the node reports it to the curator: the report's own message. */
export type NodeManagementCall = MessageInitShape<typeof ReportNodeManagementCallRequestSchema>;

/** The calls that change the node: each one goes to the audit trail. */
export const REPORTED_METHODS: ReadonlySet<string> = new Set([
  "NodeManagement/Reboot",
  "NodeManagement/PowerOff",
  "NodeManagement/DefragmentEtcd",
  "NodeManagement/RecoverConsensus",
  "NodeManagement/Reset",
  "NodeManagement/Update",
  "NodeManagement/Rollback",
  "NodeManagement/ImportImages",
]);

function reporter(report: NodeManagementOptions["report"]): ((call: AuditedCall) => void) | undefined {
  if (!report) return undefined;
  return (call) => {
    const refused = call.error !== undefined && isRefusal(call.error);
    if (!refused && !REPORTED_METHODS.has(call.method)) return;
    report({
      method: call.method,
      caller: actorOf(call.peer, call.remoteAddress),
      detail: describeRequest(call.request),
      result: callResult(call.error),
      refused,
      timeMs: BigInt(Date.now()),
    });
  };
}

/** A refused scrape (GET /metrics), as the audit trail names it. */
export const METRICS_METHOD = "NodeManagement/Metrics";

function scrapeReporter(report: NodeManagementOptions["report"]): ((refusal: ScrapeRefusal) => void) | undefined {
  if (!report) return undefined;
  return ({ peer, remoteAddress, reason }) =>
    report({ method: METRICS_METHOD, caller: actorOf(peer, remoteAddress), detail: "", result: `PERMISSION_DENIED: ${reason}`, refused: true, timeMs: BigInt(Date.now()) });
}

export function nodeManagementRunnable(options: NodeManagementOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const { credentials } = membership;
    const server = createServer();
    addService(server, NodeManagement, nodeManagementService({ ...options, logger: ctx.logger }), {
      ca: () => credentials.ca,
      policy: NODE_MANAGEMENT_POLICY,
      onError: (method, err) => ctx.logger.debug("call failed", { method, error: String(err) }),
      ...(options.report ? { audit: reporter(options.report)! } : {}),
      ...(options.metrics ? { meter: options.metrics.meter } : {}),
    });
    const refused = scrapeReporter(options.report);
    const http = options.metrics ? metricsHandler({ metrics: options.metrics, ca: () => credentials.ca, ...(refused ? { refused } : {}) }) : undefined;
    const address = hostPort(membership.address, options.port ?? NODE_MANAGEMENT_PORT);
    try {
      await listen(
        server,
        address,
        serverCredentials({ certificate: credentials.certificate, privateKey: credentials.privateKey, allowHttp1: http !== undefined }),
        clusterListenLimits(() => credentials.ca),
        http,
      );
    } catch (err) {
      server.forceShutdown();
      throw new Error(`could not listen on ${address}: ${(err as Error).message}`, { cause: err });
    }
    ctx.logger.info("node management serving", { address });
    ctx.signalHealthy();
    try {
      await untilCancelled(ctx.signal);
    } finally {
      server.forceShutdown();
    }
  };
}
