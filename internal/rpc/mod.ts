// Package rpc: how every API of the system is served and called.
//
//   proto/*.proto ──buf──▶ proto/gen/*_pb.ts (GenService descriptors)
//                                   │
//            ┌──────────────────────┴───────────────────────┐
//            ▼                                              ▼
//   addService(server, Svc, impl, {ca, policy})     createClient(Svc, target, {credentials})
//     raw bytes ─▶ size check ─▶ fromBinary           create ─▶ toBinary ─▶ grpc-js
//     TLS client cert ─▶ authenticate ─▶ Peer         errors ─▶ RpcError(code, details)
//     policy check ─▶ handler(request, ctx)
//     thrown DomainError ─▶ toStatus ─▶ gRPC status
//
// Invariants:
//  - Every API runs over TLS. Every method has a policy (owner, node,
//    cluster, or key): the caller is authenticated from its client
//    certificate and checked before the handler runs. Only "key" methods
//    (the handshakes) accept certificates not under the cluster CA.
//  - Domain errors map to status codes in errors.ts and nowhere else; a
//    refusal always carries a message that says why.
//  - Malformed or oversized requests are INVALID_ARGUMENT, never a crash.

export {
  addService,
  createClient,
  MAX_REQUEST_BYTES,
  type CallContext,
  type CallOptions,
  type ClientOptions,
  type ServeOptions,
  type ServiceClient,
  type ServiceImpl,
  type ServicePolicy,
} from "./service.ts";
export {
  DomainError,
  InvalidArgumentError,
  NotFoundError,
  AlreadyExistsError,
  PermissionDeniedError,
  UnauthenticatedError,
  FailedPreconditionError,
  UnavailableError,
  RpcError,
  Status,
  toStatus,
} from "./errors.ts";
export { authenticate, refusal, type Peer, type Policy } from "./peer.ts";
export {
  serverCredentials,
  channelCredentials,
  channelOptions,
  peerCertificateOf,
  CLUSTER_SERVER_NAME,
  type ServerTlsOptions,
  type ClientTlsOptions,
} from "./tls.ts";
