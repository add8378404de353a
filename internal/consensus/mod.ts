// Package consensus: this node's etcd member, and clients to it.
//
//   control-plane worker ──runEtcdMember(ctx, {name, peers, tls, state})──▶ etcd (child process)
//                                  │  supervised by the process runner:
//                                  │  stdout/stderr → logger, SIGTERM → SIGKILL, exit = death
//                                  ▼
//   curator ◀── connectEtcd({endpoints, tls}) ── https://127.0.0.1:2379 (mutual TLS)
//   other members ◀──────────────── https://<node address>:2380 (peer mutual TLS)
//
// Both etcd's peer and client TLS use the etcd peer CA (a CA of its own,
// kept in etcd by the curator, distinct from the cluster CA): holding a node
// certificate does not make a node an etcd peer; only a consensus member
// certificate issued by the curator does.
//
// upkeep.ts keeps each member's database in shape: etcd compacts its own
// history (periodic, AUTO_COMPACTION_RETENTION), a quota from the data
// partition's size stops writes before the disk fills, and each consensus
// node defragments its own member when it is mostly free pages and walks
// it back from a NOSPACE alarm (compact, defragment, disarm).
//
// A joining member whose publish the leader's first snapshot overtook
// would wait out etcd's request timeout (10 s) before it served; the runner
// runs it once more from that snapshot instead (runEtcdMember says why).
//
// Invariants:
//  - The client port listens on loopback only: the local curator is etcd's
//    only client. Peers talk on the node's address.
//  - The member is healthy only once it answers a read, so dependants
//    waiting on it never see a half-started etcd.

export {
  runEtcdMember,
  etcdArgs,
  parseEtcdLine,
  peerUrl,
  clientUrl,
  ETCD_BINARY,
  EtcdNotAMemberError,
  etcdutlBeside,
  ETCD_MIN_FREE_BYTES,
  ETCD_PEER_PORT,
  ETCD_CLIENT_PORT,
  memberQuota,
  type EtcdMemberOptions,
  type EtcdPeer,
} from "./etcd_process.ts";
export {
  AUTO_COMPACTION_RETENTION,
  defragment,
  describeMember,
  etcdMember,
  memberStatus,
  needsDefrag,
  quotaFor,
  recoverFromNoSpace,
  upkeepRunnable,
  type EtcdMember,
  type MemberStatus,
  type UpkeepOptions,
} from "./upkeep.ts";
export { connectEtcd, loadEtcd3, ETCD_CALL_TIMEOUT_MS } from "./etcd_client.ts";
export { fetchEtcdMetrics, MAX_ETCD_METRICS_BYTES } from "./etcd_metrics.ts";
export { createEtcdCA, issueMemberCertificate, issueEtcdClientCertificate, ETCD_CA_COMMON_NAME, ETCD_SERVER_NAME, type EtcdTls } from "./certificates.ts";
