// Package rpc: how every API of the system is served and called.
//
//   proto/*.proto ──buf──▶ proto/gen/*_pb.ts (GenService descriptors)
//                                   │
//            ┌──────────────────────┴───────────────────────┐
//            ▼                                              ▼
//   addService(server, Svc, impl, {ca, policy})     createClient(Svc, target, {credentials})
//     (service.ts)                                     (client.ts)
//     raw bytes ─▶ size check ─▶ fromBinary           create ─▶ toBinary ─▶ grpc-js
//     TLS client cert ─▶ authenticate ─▶ Peer         errors ─▶ RpcError(code, details)
//       (once per connection; validity per call)
//     policy check ─▶ handler(request, ctx)
//     thrown DomainError ─▶ toStatus ─▶ gRPC status
//
//   createServer() + listen(): bounded connections, handshakes (10 s), a first call
//     let in within 10 s, idle closes (5 min), streams, keepalive; a quarter kept
//     for known sources (an owner's or a node's call let in from there);
//     (deadline.ts: a known source's deadlines give back the time the process was away,
//     and so does a certificate under the cluster CA at the first-call deadline)
//   RefusalBudget: how many refused calls an audit trail records one by one
//   channelCredentials({server: {ca, verify}}): every client says who the server must be
//
// Invariants:
//  - Every API between machines runs over TLS. Every client verifies the
//    server's certificate against what it expects of that server (which
//    node, which role, which address); no client overrides identity to a
//    name shared by many. The one exception is a local service
//    (listenLocal): a unix socket, 0600, whose callers are processes on
//    the node (the kubelet calling the volume plugin), Peer "local", served
//    only to methods whose policy is "local", and never the other way round.
//  - Every server bounds its connections, handshakes and streams, and how
//    long a connection may hold a slot without a call let in; all servers
//    of a process together stay below the files PID 1 gives itself.
//  - A stream is audited once, when it ends, with how it ended.
//  - Every method has a policy (owner, node, cluster, key or local): the caller is authenticated from its client
//    certificate and checked before the handler runs. Only "key" methods
//    (the handshakes) accept certificates not under the cluster CA.
//  - Domain errors map to status codes in errors.ts and nowhere else; a
//    refusal always carries a message that says why.
//  - Malformed or oversized requests are INVALID_ARGUMENT, never a crash.
//  - Every status message is encodable (text.ts): bounded, printable,
//    well-formed UTF-16, whatever input it quotes; an error that quotes
//    input quotes it through quote().

export { hostPort, isLoopback, sourceAddress } from "./address.ts";
export { dialFromOwnAddress, dialingFrom, DialFromError } from "./dial_from.ts";
export { encodable, firstUnprintable, fitted, printable, quote, QUOTE_MAX_CHARS, STATUS_MAX_CHARS } from "./text.ts";
export { addService, MAX_REQUEST_BYTES, LOCAL_SERVICE, type AuditedCall, type CallMeter, type CallContext, type ServeOptions, type ServiceImpl, type ServicePolicy } from "./service.ts";
export { createClient, type CallOptions, type ClientOptions, type ConnectResult, type ServiceClient } from "./client.ts";
export { partialService } from "./partial_service.ts";
export { peerDeadline, type PeerDeadline } from "./deadline.ts";
export {
  DomainError,
  AbortedError,
  InvalidArgumentError,
  NotFoundError,
  AlreadyExistsError,
  PermissionDeniedError,
  UnauthenticatedError,
  FailedPreconditionError,
  UnavailableError,
  ResourceExhaustedError,
  UnimplementedError,
  RpcError,
  Status,
  toStatus,
  deadlineReason,
} from "./errors.ts";
export { authenticate, refusal, type Peer, type Policy } from "./peer.ts";
export {
  serverCredentials,
  channelCredentials,
  channelOptions,
  peerCertificateOf,
  RotatingServerCredentials,
  ServerIdentityError,
  UNNAMED_SERVER_SNI,
  TLS_HANDSHAKE_TIMEOUT_MS,
  type ServerIdentity,
  type ServerTlsOptions,
  type ClientTlsOptions,
} from "./tls.ts";
export {
  createServer,
  listen,
  listenLocal,
  localCredentials,
  connectionDrops,
  MAX_CONNECTIONS,
  FIRST_FLIGHT_TIMEOUT_MS,
  heardClientHello,
  MAX_PENDING_HANDSHAKES,
  MAX_CONNECTIONS_PER_SOURCE,
  MAX_PENDING_HANDSHAKES_PER_SOURCE,
  MAX_HTTP_ANSWERS_IN_FLIGHT,
  MAX_HTTP_ANSWERS_PER_CONNECTION,
  MAX_CONCURRENT_STREAMS,
  KEEPALIVE_TIME_MS,
  FIRST_CALL_TIMEOUT_MS,
  ASKED_EXTENSIONS_VOUCHED,
  CONNECTION_IDLE_MS,
  MAX_CONNECTIONS_PER_PROCESS,
  KNOWN_SOURCE_HANDSHAKE_TIMEOUT_MS,
  NODE_FILE_LIMIT,
  FILE_RESERVE,
  type HttpAnswer,
  type HttpHandler,
  type HttpRequest,
  type ListenLimits,
  type ListenerCounters,
  clusterListenLimits,
  vouchedUnder,
} from "./listener.ts";
export { actorOf, callResult, describeRequest, isRefusal, MAX_DETAIL_CHARS } from "./audit_text.ts";
export { RefusalBudget, leftOutLine, type LeftOut } from "./refusal_budget.ts";
