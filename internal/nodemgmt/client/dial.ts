// Calling one node's management service as the owner. The node must prove
// it is the node asked for: a node certificate under the cluster CA whose
// name is that node's ID and matches its key. The address came from the
// node's own status report, so it is trusted for nothing but reaching it.

import type { KeyObject, X509Certificate } from "node:crypto";
import { NodeManagement } from "../../../proto/gen/api/node_management_pb.ts";
import { nodeIdentityProblem } from "../../pki/mod.ts";
import { channelCredentials, channelOptions, createClient, hostPort, type ServiceClient } from "../../rpc/mod.ts";

/** The port every node serves NodeManagement on (the curator is on 7835). */
export const NODE_MANAGEMENT_PORT = 7836;

export interface OwnerTls {
  ca: X509Certificate;
  certificate: X509Certificate;
  privateKey: KeyObject;
}

/**
 * How often the owner's connection to a node is pinged, and how long a ping
 * may go unanswered: a node that loses its power mid-call (an update being
 * written) sends no reset, and the call would otherwise wait out its whole
 * deadline (20 min for an update) on a connection to nobody. A busy
 * emulated node answers a ping within seconds.
 */
export const NODE_KEEPALIVE = { timeMs: 10_000, timeoutMs: 20_000 };

/** A client of node `nodeId`'s management service at `host`. */
export function dialNodeManagement(nodeId: string, host: string, owner: OwnerTls, port = NODE_MANAGEMENT_PORT, keepalive = NODE_KEEPALIVE): ServiceClient<typeof NodeManagement> {
  return createClient(NodeManagement, hostPort(host, port), {
    credentials: channelCredentials({
      server: { ca: owner.ca, verify: (certificate) => nodeIdentityProblem(certificate, nodeId) },
      certificate: owner.certificate,
      privateKey: owner.privateKey,
    }),
    channelOptions: { ...channelOptions(nodeId), "grpc.keepalive_time_ms": keepalive.timeMs, "grpc.keepalive_timeout_ms": keepalive.timeoutMs },
  });
}
