// Consensus membership: turning the consensus role on and off for a node.
//
//   grant:  etcd member add (as learner) ─▶ role carries peer certificate
//           and the members to join through ─▶ node starts etcd "existing"
//           ─▶ promoteLearners() makes it a voter once it has caught up
//   revoke: role cleared (the record first) ─▶ etcd member remove
//           ─▶ node stops etcd and deletes its data
//   reconcile (the leader, every few seconds): an etcd member that no
//           node's consensus role accounts for is removed
//   the leader's own node: role cleared ─▶ its curator resigns while its
//           etcd serves ─▶ the next leader's reconcile removes the member
//
// The etcd member list is the truth for who is a member; node records say
// what each node should run. A change spans both, so it is made in the
// order that the reconciler can finish: a revoke interrupted after its
// record (the curator leader removing its own node's member loses its
// etcd, and its caller the reply) leaves a member the reconciler removes;
// a grant interrupted after its learner was added leaves a learner that
// never starts, which the reconciler removes after ORPHAN_LEARNER_GRACE_MS,
// instead of letting it block every later join.
//
// A learner whose node holds the role but never catches up (its etcd never
// starts: powered off after the grant, a full disk, a crash loop) would
// block every later join too, since etcd takes one learner at a time. The
// leader gives it up after LEARNER_CATCH_UP_MS (holdConsensusJoins): the
// learner goes, the role stays (what the node should run), and the node
// gets a new learner once its heartbeats say it is up again, at most once
// per REJOIN_BACKOFF_MS (doubling). The node, told by its etcd that the
// cluster no longer has its member, drops its etcd data and joins again
// (roleserve/worker_controlplane.ts).

import { create } from "@bufbuild/protobuf";
import type { Etcd3 } from "etcd3";
import { connect } from "node:net";
import { NodeRoles_ConsensusMember_PeerSchema, NodeRoles_ConsensusMemberSchema, type NodeRoles_ConsensusMember } from "../../proto/gen/common/common_pb.ts";
import type { NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import { issueMemberCertificate, peerUrl } from "../consensus/mod.ts";
import type { Logger } from "../log/mod.ts";
import { publicKeyFromRaw, type CA } from "../pki/mod.ts";
import { FailedPreconditionError } from "../rpc/mod.ts";
import { CuratorStore, ETCD_PREFIX } from "./store.ts";
import { removeAllCampaigns } from "./leadership.ts";

export interface EtcdMember {
  id: string;
  name: string;
  peerUrls: string[];
  isLearner: boolean;
}

export async function etcdMembers(etcd: Etcd3): Promise<EtcdMember[]> {
  const response = await etcd.cluster.memberList({});
  return response.members.map((m) => ({ id: m.ID, name: m.name, peerUrls: m.peerURLs, isLearner: Boolean(m.isLearner) }));
}

/** The consensus role payload for a node: its member certificate and who to join through. */
export function consensusRole(ca: CA, record: Pick<NodeRecord, "id" | "publicKey" | "status">, peers: EtcdMember[]): NodeRoles_ConsensusMember {
  const address = record.status?.externalAddress;
  if (!address) throw new FailedPreconditionError(`node ${record.id} has not reported its address yet; it cannot become a consensus member`);
  const certificate = issueMemberCertificate(ca, publicKeyFromRaw(record.publicKey), { name: record.id, addresses: [address] });
  return create(NodeRoles_ConsensusMemberSchema, {
    caCertificate: new Uint8Array(ca.certificate.raw),
    peerCertificate: new Uint8Array(certificate.raw),
    peers: peers.flatMap((p) => (p.peerUrls[0] ? [{ name: p.name, url: p.peerUrls[0] }] : [])),
    address,
  });
}

/**
 * Adds the node to etcd as a learner (unless it is a member already) and
 * returns its role payload, listing every member (itself included).
 */
export async function grantConsensus(etcd: Etcd3, store: CuratorStore, record: NodeRecord, logger: Logger): Promise<NodeRoles_ConsensusMember> {
  const address = record.status?.externalAddress;
  if (!address) throw new FailedPreconditionError(`node ${record.id} has not reported its address yet; it cannot become a consensus member`);
  const url = peerUrl(address);
  let members = await etcdMembers(etcd);
  if (!members.some((m) => m.peerUrls.includes(url))) {
    const learner = members.find((m) => m.isLearner);
    if (learner) {
      // etcd admits one learner at a time.
      throw new FailedPreconditionError(`${learner.name || "another node"} is still catching up as an etcd learner; one node joins etcd at a time, try again once it votes`);
    }
    try {
      await etcd.cluster.memberAdd({ peerURLs: [url], isLearner: true });
    } catch (err) {
      // etcd refuses while a member is down or a new one has not started,
      // and for 5 s after a promotion: the caller is told, and the log
      // keeps only the learner added (a refused formation retried 17
      // times in those 5 s, each logged as "adding").
      throw new FailedPreconditionError(`etcd cannot take a new member right now (${(err as Error).message}); try again once every member is up`);
    }
    logger.info("added etcd learner", { node: record.id, peerUrl: url });
    members = await etcdMembers(etcd);
  }
  // A member that was just added has no name until it starts: name it here.
  const named = members.map((m) => (m.peerUrls.includes(url) ? { ...m, name: record.id } : m));
  return consensusRole(await store.ca("etcd"), record, named);
}

/** The etcd member of a node: by name (its node ID, once it started), or by the peer URL of its address. */
function memberOf(members: EtcdMember[], record: Pick<NodeRecord, "id" | "status">): EtcdMember | undefined {
  const address = record.status?.externalAddress;
  return members.find((m) => m.name === record.id || (address ? m.peerUrls.includes(peerUrl(address)) : false));
}

/** Refuses a revoke that would take etcd's last voter: before anything is written. */
export async function checkRevocable(etcd: Etcd3, record: NodeRecord): Promise<void> {
  const members = await etcdMembers(etcd);
  const member = memberOf(members, record);
  if (member && !member.isLearner && members.filter((m) => !m.isLearner).length <= 1) {
    throw new FailedPreconditionError(`node ${record.id} is the last voting etcd member; the cluster would lose its data`);
  }
}

/**
 * Removes the node's etcd member, if it has one, once its record no longer
 * holds the consensus role. A failure is logged, not thrown: the record
 * is written, and the reconciler (reconcileMembership) removes the member.
 */
export async function revokeConsensus(etcd: Etcd3, record: NodeRecord, logger: Logger): Promise<void> {
  try {
    const member = memberOf(await etcdMembers(etcd), record);
    if (!member) return;
    logger.info("removing etcd member", { node: record.id, member: member.id });
    await etcd.cluster.memberRemove({ ID: member.id });
  } catch (err) {
    logger.warn("could not remove the etcd member of a node that left consensus; the membership reconciler will", { node: record.id, reason: (err as Error).message });
  }
}

/**
 * After a recovery from a lost quorum or a restore (etcd restarted as a
 * one-member cluster on node `survivor`): every curator's campaign goes
 * (they are all gone), every other node's record loses the consensus role,
 * and the survivor's own role lists only itself as a peer.
 * Unfenced, like the bootstrap: it runs before any curator does. Writing a
 * record that is already so changes nothing, so a recovery interrupted here
 * and run again converges. Returns the nodes that lost the role.
 */
export async function dropLostConsensusRoles(etcd: Etcd3, survivor: string, logger: Logger): Promise<string[]> {
  const store = new CuratorStore(etcd.namespace(ETCD_PREFIX));
  const ghosts = await removeAllCampaigns(store.etcd);
  if (ghosts > 0) logger.info("removed the campaigns of curators gone with the quorum", { keys: ghosts });
  const { nodes } = await store.nodes();
  const self = (await etcdMembers(etcd)).find((m) => m.name === survivor);
  const dropped: string[] = [];
  for (const node of nodes) {
    const role = node.roles?.consensusMember;
    if (!role) continue;
    if (node.id === survivor) {
      const url = self?.peerUrls[0];
      if (!url || (role.peers.length === 1 && role.peers[0]?.url === url)) continue;
      await store.updateNode(node.id, (record) => {
        const own = record.roles?.consensusMember;
        if (own) own.peers = [create(NodeRoles_ConsensusMember_PeerSchema, { name: survivor, url })];
        return record;
      });
      continue;
    }
    await store.updateNode(node.id, (record) => {
      if (record.roles) record.roles.consensusMember = undefined;
      return record;
    });
    logger.info("dropped the consensus role of a member lost with the quorum", { node: node.id });
    dropped.push(node.id);
  }
  return dropped;
}

/** How long a learner that never started, and that no consensus role accounts for, may stay (a grant in flight). */
export const ORPHAN_LEARNER_GRACE_MS = 30_000;

/**
 * Holds etcd's members against the consensus roles: a member that no
 * node's role accounts for is removed (a learner that never started only
 * after ORPHAN_LEARNER_GRACE_MS, counted from when `firstSeen` first saw
 * it). The last voter is never removed, nor `self`'s: the leader's own
 * node leaving consensus resigns first, while its etcd serves, and the
 * next leader removes its member (handing over without a lease to wait
 * out). Returns the removed members' names (or IDs, for one that never
 * started).
 */
export async function reconcileMembership(etcd: Etcd3, nodes: readonly NodeRecord[], logger: Logger, firstSeen: Map<string, number>, now = Date.now(), self?: string): Promise<string[]> {
  const members = await etcdMembers(etcd);
  const accounted = new Set(nodes.filter((n) => n.roles?.consensusMember).flatMap((n) => memberOf(members, n)?.id ?? []));
  const removed: string[] = [];
  for (const id of firstSeen.keys()) if (!members.some((m) => m.id === id && !accounted.has(id))) firstSeen.delete(id);
  for (const member of members) {
    if (accounted.has(member.id) || (self !== undefined && member.name === self)) continue;
    if (!member.isLearner && members.filter((m) => !m.isLearner).length - removed.length <= 1) continue;
    if (!member.name) {
      const since = firstSeen.get(member.id) ?? now;
      firstSeen.set(member.id, since);
      if (now - since < ORPHAN_LEARNER_GRACE_MS) continue;
    }
    logger.warn("removing an etcd member that no consensus role accounts for (a change interrupted halfway, or the last leader's own node that left)", {
      member: member.name || member.id,
      learner: member.isLearner,
    });
    await etcd.cluster.memberRemove({ ID: member.id });
    firstSeen.delete(member.id);
    removed.push(member.name || member.id);
  }
  return removed;
}

/**
 * Promotes every learner that etcd agrees has caught up. etcd refuses to
 * promote one that has not; that is expected, and retried later. Returns
 * the promoted members' names, and how many learners are left (including
 * one that has not started yet, and so has no name).
 */
export async function promoteLearners(etcd: Etcd3, logger: Logger): Promise<{ promoted: string[]; waiting: number }> {
  const promoted: string[] = [];
  let waiting = 0;
  for (const member of await etcdMembers(etcd)) {
    if (!member.isLearner) continue;
    if (!member.name) {
      waiting++;
      continue;
    }
    try {
      await etcd.cluster.memberPromote({ ID: member.id });
      logger.info("promoted etcd learner to voting member", { member: member.name });
      promoted.push(member.name);
    } catch (err) {
      waiting++;
      logger.debug("learner not promoted yet", { member: member.name, reason: (err as Error).message });
    }
  }
  return { promoted, waiting };
}

/** How long etcd gets to hand raft leadership over before the attempt is given up (and retried later). */
export const RAFT_HANDOFF_TIMEOUT_MS = 5_000;

/**
 * Keeps etcd's raft leader off the curator leader's node. When the local
 * etcd member leads raft, this hands raft leadership to another voting
 * member (trying them in turn over successive calls), and returns its name;
 * otherwise it does nothing and returns undefined.
 *
 * Why: when etcd's raft leader changes, the new raft leader extends every
 * lease by an election timeout (etcd's lessor.Promote), because it cannot
 * know when the old leader last saw a keepalive. If one node held both
 * leaderships, losing it would cost an etcd election, then that extension,
 * then the curator lease: about 20 s here instead of the lease TTL (15 s). With
 * the two apart, losing the curator leader's node costs the curator lease
 * alone, and losing the raft leader's node costs no curator failover at all
 * (the extension keeps the living curator leader's lease).
 */
export async function handRaftLeadershipAway(etcd: Etcd3, logger: Logger, attempt = 0): Promise<string | undefined> {
  const status = await etcd.maintenance.status();
  if (status.leader !== status.header.member_id) return undefined;
  const others = (await etcdMembers(etcd)).filter((m) => !m.isLearner && m.name && m.id !== status.header.member_id);
  // A transfer to a member that is down stalls etcd's writes until it times
  // out, so only members whose peer port answers are candidates.
  for (let i = 0; i < others.length; i++) {
    const target = others[(attempt + i) % others.length]!;
    if (!(await peerPortAnswers(target))) continue;
    await etcd.maintenance.moveLeader({ targetID: target.id }, { deadline: Date.now() + RAFT_HANDOFF_TIMEOUT_MS });
    logger.info("handed etcd raft leadership to another member, away from the curator leader", { to: target.name });
    return target.name;
  }
  return undefined;
}

/** How long a member's peer port gets to accept a TCP connection before the member counts as down. */
const PEER_PROBE_TIMEOUT_MS = 1_000;

function peerPortAnswers(member: EtcdMember): Promise<boolean> {
  const url = member.peerUrls[0];
  if (!url) return Promise.resolve(false);
  const { hostname, port } = new URL(url);
  return new Promise((resolve) => {
    const socket = connect({ host: hostname.replace(/^\[|\]$/g, ""), port: Number(port) });
    const done = (ok: boolean) => {
      socket.destroy();
      resolve(ok);
    };
    socket.setTimeout(PEER_PROBE_TIMEOUT_MS, () => done(false));
    socket.once("connect", () => done(true));
    socket.once("error", () => done(false));
  });
}

/** How long a learner whose node holds the consensus role may take to catch up (to be promoted) before the leader gives it up. */
export const LEARNER_CATCH_UP_MS = 5 * 60_000;
/** The first wait before a node whose learner was given up gets a new one; each further give-up doubles it, to REJOIN_BACKOFF_MAX_MS. */
export const REJOIN_BACKOFF_MS = 60_000;
export const REJOIN_BACKOFF_MAX_MS = 30 * 60_000;

/** The two waits of holdConsensusJoins; process tests shorten them (test/learner_process.test.ts). */
export interface ConsensusJoinTiming {
  /** LEARNER_CATCH_UP_MS unless given. */
  catchUpMs: number;
  /** REJOIN_BACKOFF_MS unless given (doubling to REJOIN_BACKOFF_MAX_MS). */
  rejoinBackoffMs: number;
}

/** What the leader remembers between rounds of holdConsensusJoins (lost with the leadership: a new leader starts counting again). */
export interface ConsensusJoins {
  /** When each learner (by member ID) was first seen a learner. */
  learnerSince: Map<string, number>;
  /** Per node whose learner was given up: how many times, and when it may get a new one. */
  rejoin: Map<string, { givenUp: number; notBefore: number }>;
}

export function newConsensusJoins(): ConsensusJoins {
  return { learnerSince: new Map(), rejoin: new Map() };
}

/** What one round of holdConsensusJoins did, for the audit trail. */
export type ConsensusJoinChange = { kind: "given-up"; node: string; learnerMs: number; started: boolean; rejoinInMs: number } | { kind: "rejoining"; node: string; givenUp: number };

/**
 * One round of the leader's hold on consensus joins:
 *  - a learner of a node that holds the role, still a learner
 *    `catchUpMs` after it was first seen, is removed from etcd (the role
 *    stays in the record), so that the next join can go on;
 *  - a node that holds the role but has no member (its learner given up,
 *    or a removal of one interrupted) gets a new learner, and its role a
 *    payload naming today's members, once no other learner is catching up,
 *    `healthy(node)` says its heartbeats arrive, and its backoff has passed.
 * A node that votes is forgotten. Records are written through `store`
 * (fenced on the leadership).
 */
export async function holdConsensusJoins(
  etcd: Etcd3,
  store: CuratorStore,
  nodes: readonly NodeRecord[],
  joins: ConsensusJoins,
  options: { healthy: (node: string) => boolean; logger: Logger; now?: number; timing?: ConsensusJoinTiming },
): Promise<ConsensusJoinChange[]> {
  const now = options.now ?? Date.now();
  const catchUpMs = options.timing?.catchUpMs ?? LEARNER_CATCH_UP_MS;
  const backoffMs = options.timing?.rejoinBackoffMs ?? REJOIN_BACKOFF_MS;
  const changes: ConsensusJoinChange[] = [];
  let members = await etcdMembers(etcd);
  for (const id of joins.learnerSince.keys()) if (!members.some((m) => m.id === id && m.isLearner)) joins.learnerSince.delete(id);
  const holders = nodes.filter((n) => n.roles?.consensusMember);
  for (const id of joins.rejoin.keys()) if (!holders.some((n) => n.id === id)) joins.rejoin.delete(id);
  for (const node of holders) {
    const member = memberOf(members, node);
    if (!member) continue;
    if (!member.isLearner) {
      joins.rejoin.delete(node.id);
      continue;
    }
    const since = joins.learnerSince.get(member.id) ?? now;
    joins.learnerSince.set(member.id, since);
    if (now - since < catchUpMs) continue;
    const givenUp = (joins.rejoin.get(node.id)?.givenUp ?? 0) + 1;
    const rejoinInMs = Math.min(backoffMs * 2 ** (givenUp - 1), REJOIN_BACKOFF_MAX_MS);
    options.logger.warn("giving up an etcd learner that did not catch up: removed, so that other nodes can join; its node keeps the consensus role and gets a new learner once it is up", {
      node: node.id,
      learnerMs: now - since,
      started: Boolean(member.name),
      rejoinInMs,
    });
    await etcd.cluster.memberRemove({ ID: member.id });
    joins.learnerSince.delete(member.id);
    joins.rejoin.set(node.id, { givenUp, notBefore: now + rejoinInMs });
    changes.push({ kind: "given-up", node: node.id, learnerMs: now - since, started: Boolean(member.name), rejoinInMs });
    members = await etcdMembers(etcd);
  }
  for (const node of holders) {
    if (memberOf(members, node) || members.some((m) => m.isLearner)) continue;
    const rejoin = joins.rejoin.get(node.id);
    if ((rejoin && now < rejoin.notBefore) || !options.healthy(node.id)) continue;
    options.logger.info("giving a consensus node without an etcd member a new learner", { node: node.id, givenUp: rejoin?.givenUp ?? 0 });
    const role = await grantConsensus(etcd, store, node, options.logger);
    await store.updateNode(node.id, (record) => {
      if (record.roles?.consensusMember) record.roles.consensusMember = role;
      return record;
    });
    changes.push({ kind: "rejoining", node: node.id, givenUp: rejoin?.givenUp ?? 0 });
    members = await etcdMembers(etcd);
  }
  return changes;
}
