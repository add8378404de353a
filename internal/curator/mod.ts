// Package curator: the cluster's control service, a gRPC API over etcd.
//
//   owner (ctl) ──mTLS──▶ AAA.Escrow (owner key → owner certificate)
//               ──mTLS──▶ Management  (tickets, cluster info, nodes, approve, roles)
//   nodes       ──mTLS──▶ Curator     (watch, status, register/commit/join)
//                             │ Watch: one etcd watch for all its watchers, fanned out (watch.ts)
//                             │
//                 every handler: authenticated peer ✓ policy ✓
//                             │        (internal/rpc: once per connection)
//                             ▼
//   writes:    CuratorStore ── etcd txn ──▶ /nodecore/cluster, /nodecore/ca/{cluster,etcd},
//                                           /nodecore/nodes/<id>  (NodeRecord protobufs)
//                                           /nodecore/joinkeys/<hex> → id (one node per join key)
//   reads:     StateCache ◀── one watch of /nodecore/, kept by the curator ── etcd
//              (state_cache.ts)   answers from memory once the copy is proven at
//                                 etcd's revision, learnt by one linearizable check
//                                 shared by concurrent reads (read_index.ts)
//              leadership ── etcd election (lease) ──▶ Value<Leadership>
//              promoter   ── leader only: etcd learners → voters once caught up
//              membership ── leader only: etcd's members held against the consensus
//                            roles; a learner that does not catch up is given up,
//                            its node given a new one once it is up
//                            (consensus_membership.ts)
//
// Clients reach curators only through ./client (endpoints, the port, what
// a curator must prove); this package serves, that one calls.
//
// Invariants:
//  - A curator serves only with a curator certificate it mints from the CA
//    in etcd while its node record holds the consensus role
//    (curator_certificate.ts); clients accept nothing else as a curator.
//  - Every free-form request field is validated before use (validate.ts).
//  - etcd is the only state; a curator can be killed at any time. Writes are
//    compare-and-swap transactions, and only the elected leader accepts them
//    (others answer UNAVAILABLE and name the leader); reads are served by any,
//    from memory, and are linearizable all the same: a read never misses a
//    write acknowledged before it began, whichever curator answers it.
//  - A node's cluster unlock key leaves the curator only to that node (commit
//    stores it, join returns it to the holder of the node's join key).
//  - Every refusal says why, with a gRPC status code (internal/rpc maps them).
//  - State records are converted to wire messages in convert.ts only.
//
// Tests (of this package and of others) get a real one-node cluster on
// loopback from test_cluster.ts, which they import directly: it is not
// exported here, so product code that imports this package never bundles it.

export { curatorRunnable, PROMOTE_INTERVAL_MS, type CuratorOptions } from "./server.ts";
export { writeBootstrapState, writeRestoredNode, REGISTER_TICKET_BYTES, type BootstrapState } from "./bootstrap.ts";
export { curatorReader, curatorSnapshotState, type CuratorReader } from "./reader.ts";
export { fitNodeStatus, MAX_BACKUP_ERROR_CHARS } from "./validate.ts";
export { backupChunks, type BackupAbout } from "./backup.ts";
export { type ConsensusJoinTiming } from "./consensus_membership.ts";
export { consensusRole, dropLostConsensusRoles, etcdMembers, grantConsensus, revokeConsensus, promoteLearners, type EtcdMember } from "./consensus_membership.ts";
export { ELECTION_NAME, LEADER_LEASE_TTL_S, type Leadership, type LeaderInfo } from "./leadership.ts";
export { UNLOCK_KEY_BYTES } from "./service_curator.ts";
export { SUPERVISION_LINE } from "./convert.ts";
