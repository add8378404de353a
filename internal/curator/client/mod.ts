// Package curator/client: the one way to reach the cluster's control service.
//
//   directory (from the cluster) / seeds (parameters, ctl config)
//        │ endpointsOfDirectory, parseEndpoint
//        ▼
//   CuratorEndpoint {host, port, nodeId?} ──dialCurator──▶ grpc-js channel
//                                              │ TLS: chain to the cluster CA
//                                              │ + curatorIdentityProblem():
//                                              │   curator certificate, the
//                                              │   expected node, the dialled IP
//                                              ▼
//                                  Curator / Management / AAA client
//   CuratorPool.call(endpoints, call): all dialled at once, the leader first,
//   then in the order they connect, following the leader hint that
//   followers send (leader.ts) until one answers; the error says, for each
//   curator, what happened (failover.ts): connection refused, no route,
//   no connection in time, a certificate not under the CA, the wrong
//   identity, not the leader, or a deadline. callAnyCurator is the
//   one-shot form.
//   heartbeat.ts: how often nodes beat and when the leader calls them
//   timed out; both sides read it from here.
//
// Enrolment (register, join), the role server and ctl import this package,
// never the curator server. It knows the port, how endpoints are written,
// and what a curator must prove.
//
// Invariants:
//  - A server is a curator only if it presents a curator certificate under
//    the cluster CA for the address dialled (and the node expected). A node
//    certificate, however genuine, never passes: only consensus members get
//    curator certificates, and only while the cluster's records say so.
//  - Directories are built by the cluster from its own record of consensus
//    members, never from what a node says about itself.

export { CURATOR_PORT, EndpointError, endpointsOfDirectory, formatAddress, formatEndpoint, parseEndpoint, sameAddress, type CuratorEndpoint } from "./endpoint.ts";
export { curatorIdentityProblem } from "./identity.ts";
export { directoryOf, consensusAddressOf } from "./directory.ts";
export { dialCurator, type DialCredentials, type CuratorClientOf } from "./dial.ts";
export { unavailableOrDeadline, NoCuratorError, CONNECT_TIMEOUT_MS, type CuratorFailure, type FailoverOptions } from "./failover.ts";
export { CuratorPool, callAnyCurator } from "./pool.ts";
export { CONNECT_PATIENCE_MS } from "./patience.ts";
export { ELECTION_TRAILER, electionTrailer, electionUnderWay, LEADER_TRAILER, leaderHintOf, leaderTrailer } from "./leader.ts";
export { HEARTBEAT_INTERVAL_MS, HEARTBEAT_TIMEOUT_MS } from "./heartbeat.ts";
export { keepaliveOptions, KEEPALIVE_TIME_MS, KEEPALIVE_TIMEOUT_MS, RECONNECT_BACKOFF_MS } from "./dial.ts";
