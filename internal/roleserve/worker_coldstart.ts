// The cold-start worker: while this node is a consensus member, keeps its
// cluster half split among the other consensus members (internal/coldstart)
// and its ESP free of the cluster half; while it is not, holds nobody's
// shares.
//
//   roles, directory ─▶ consensus member?
//     no  ─▶ drop held shares; forget the split
//     yes ─▶ join certificate (curator PrepareColdStart) ─▶ ESP
//            drop shares of owners that left consensus
//            no other member ─▶ "local-key": the sealed worker keeps the cluster half on the ESP
//            holders or threshold changed ─▶ split, HoldShare to every holder
//              all acknowledged ─▶ ESP: unlock_shares, cold-start key erased ─▶ "shared"
//              some not ─▶ "sharing" (who is missing, why) ─▶ retry with backoff
//
// Reads: membership, roles, directory, connection. Writes: the ESP's sealed
// configuration and held shares, the "coldstart" line of the node's status,
// and `sealed` (each sealed configuration it writes).

import { create } from "@bufbuild/protobuf";
import { UnlockSharesSchema, type SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import type { ClusterDirectory, NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import { dialShareHolder, dropShares, effectiveThreshold, isConsensusMember, peersOf, splitClusterHalf, SHARE_CALL_TIMEOUT_MS, type Peer } from "../coldstart/mod.ts";
import type { Value } from "../event/mod.ts";
import { exclusively, readSealedConfiguration, updateSealedConfiguration, type StorageLayout } from "../localstorage/mod.ts";
import { Backoff, sleep, type RunContext, type Runnable } from "../supervisor/mod.ts";
import { X509Certificate, type KeyObject } from "node:crypto";
import { joinCertificateProblem } from "../pki/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";
import type { ServiceBoard } from "./service_status.ts";

const SERVICE = "coldstart";
/** Retries of a split that some holder did not take: from 1 s, doubling, up to 30 s. */
const RETRY_INITIAL_MS = 1_000;
const RETRY_MAX_MS = 30_000;
/**
 * How long a holder gets to store a share: it syncs a file on its ESP, which
 * takes seconds on an emulated machine that is busy forming a cluster.
 */
const HOLD_SHARE_TIMEOUT_MS = 15_000;

export interface ColdStartOptions {
  layout: StorageLayout;
  membership: Value<ClusterMembership>;
  roles: Value<NodeRoles | undefined>;
  directory: Value<ClusterDirectory>;
  connection: Value<CuratorConnection>;
  board: ServiceBoard;
  /** Written: every sealed configuration this worker writes (the share holder serves from it). */
  sealed: Value<SealedConfiguration>;
  /** The port the other members' share holders listen on (SHARE_HOLDER_PORT unless a test says otherwise). */
  shareHolderPort?: number;
  /** Overwrites the ESP's free space, where a replaced file's old contents stay (VMs only). */
  scrubEsp?: () => Promise<void>;
  /**
   * Set while this node's etcd member serves. A new consensus member makes
   * its shares only then: on a one-vCPU VM the split, the ESP writes and the
   * holders' calls slowed the member's own join, and nothing is lost by
   * waiting (the key stays on the ESP until the split is complete).
   */
  localConsensus?: Value<unknown>;
}

type Outcome = "settled" | "retry";

/** A split of the cluster half: each holder's sealed share, and who has taken theirs. */
interface Split {
  /** Holders, threshold and epoch: a retry with the same key goes on with the same split. */
  key: string;
  shares: Map<string, Uint8Array>;
  acknowledged: Set<string>;
}

export function coldStartWorker(options: ColdStartOptions): Runnable {
  return async (ctx) => {
    const membership = await options.membership.get({ signal: ctx.signal });
    const steps = new ColdStartSteps(options, ctx, membership);
    let threshold: number | undefined;
    const backoff = new Backoff({ initialMs: RETRY_INITIAL_MS, multiplier: 2, maxMs: RETRY_MAX_MS, jitter: 0.2 });
    ctx.signalHealthy();
    for (;;) {
      const roles = options.roles.peek();
      const directory = options.directory.peek();
      const serving = options.localConsensus?.peek();
      let outcome: Outcome = "settled";
      if (roles !== undefined && directory !== undefined) {
        if (!roles.consensusMember) {
          await steps.notAMember(directory);
        } else if (options.localConsensus && serving === undefined) {
          options.board.report(SERVICE, "waiting", "waiting for this node's etcd member to serve before making shares");
        } else {
          if (threshold === undefined) threshold = await steps.prepare();
          outcome = threshold === undefined ? "retry" : await steps.member(directory, threshold);
        }
      }
      if (outcome === "settled") backoff.reset();
      // Until the roles or the directory change, or the retry is due.
      const waits = new AbortController();
      const onAbort = () => waits.abort();
      ctx.signal.addEventListener("abort", onAbort, { once: true });
      try {
        await Promise.race([
          options.roles.waitFor((r) => r !== roles, { signal: waits.signal }),
          options.directory.waitFor((d) => d !== directory, { signal: waits.signal }),
          ...(options.localConsensus ? [options.localConsensus.waitFor((l) => (l === undefined) !== (serving === undefined), { signal: waits.signal })] : []),
          ...(outcome === "retry" ? [sleep(backoff.next(), waits.signal)] : []),
        ]).catch(() => {});
      } finally {
        ctx.signal.removeEventListener("abort", onAbort);
        waits.abort();
      }
      ctx.signal.throwIfAborted();
    }
  };
}

/**
 * The worker's steps, for one run of it: each public method is one branch
 * of the diagram above (notAMember, prepare, member), and the private ones
 * are what they share (the sealed configuration, the split, the release).
 */
class ColdStartSteps {
  private readonly ownId: string;
  /** This node's credentials, for leaving and releasing shares at other members' share holders. */
  private readonly tls: { ca: X509Certificate; certificate: X509Certificate; privateKey: KeyObject };
  /** The split being handed out, kept across retries. */
  private attempt: Split | undefined;

  constructor(
    private readonly options: ColdStartOptions,
    private readonly ctx: RunContext,
    private readonly membership: ClusterMembership,
  ) {
    this.ownId = membership.credentials.nodeId;
    const { ca, certificate, privateKey } = membership.credentials;
    this.tls = { ca, certificate, privateKey };
  }

  private gone(): Error {
    return new Error(`the sealed configuration ${this.options.layout.esp.sealed} is gone`);
  }

  private sealedNow(): SealedConfiguration {
    const sealed = readSealedConfiguration(this.options.layout.esp.sealed);
    if (!sealed) throw this.gone();
    return sealed;
  }

  private async writeSealed(change: (next: SealedConfiguration) => void): Promise<void> {
    if (!(await updateSealedConfiguration(this.options.layout.esp, this.options.sealed, change))) throw this.gone();
  }

  /** After the cold-start key left the sealed configuration: its old copies leave the disk too. */
  private async scrub(): Promise<void> {
    if (!this.options.scrubEsp) return;
    await this.options.scrubEsp();
    this.ctx.logger.info("the cold-start key left the ESP; its free space is overwritten");
  }

  /**
   * Drops the shares of owners that left consensus. The shares of owners
   * still in it stay, even on a node that left consensus itself: until
   * each owner's next split is complete they may be all it has, and the
   * owner releases them (ReleaseShares) once it is.
   */
  private async pruneHeld(directory: ClusterDirectory): Promise<void> {
    // A directory without any member is not the full picture: prune only on one that has some.
    if (directory.nodes.length === 0) return;
    const dropped = await exclusively(this.options.layout.esp.path, () => dropShares(this.options.layout.esp.heldShares, (owner) => isConsensusMember(directory, owner)));
    if (dropped.length) this.ctx.logger.info("dropped the shares of nodes no longer in consensus", { owners: dropped.join(",") });
  }

  async notAMember(directory: ClusterDirectory): Promise<void> {
    await this.pruneHeld(directory);
    if (this.sealedNow().unlockShares) {
      await this.writeSealed((s) => void (s.unlockShares = undefined));
      this.options.board.report(SERVICE, "not-assigned", "not a consensus member");
    }
  }

  /** The join certificate on the ESP, and the cluster's threshold; undefined when no curator answered. */
  async prepare(): Promise<number | undefined> {
    try {
      const connection = await this.options.connection.get({ signal: this.ctx.signal });
      const response = await withCurator(connection, (client) => client.prepareColdStart({}, { timeoutMs: SHARE_CALL_TIMEOUT_MS, signal: this.ctx.signal }));
      // Each call issues a new certificate: keep the one on the ESP while it is good.
      const stored = this.sealedNow();
      const good = stored.joinCertificate.length > 0 && joinCertificateProblem(new X509Certificate(stored.joinCertificate), this.membership.credentials.ca, this.ownId) === undefined;
      if (!good) {
        await this.writeSealed((s) => void (s.joinCertificate = response.joinCertificate));
        this.ctx.logger.info("join certificate stored on the ESP");
      }
      return response.unlockShareThreshold;
    } catch (err) {
      this.ctx.signal.throwIfAborted();
      this.options.board.report(SERVICE, "waiting", `waiting for a curator to issue the join certificate: ${(err as Error).message}`);
      return undefined;
    }
  }

  async member(directory: ClusterDirectory, configured: number): Promise<Outcome> {
    await this.pruneHeld(directory);
    const peers = peersOf(directory, this.ownId).filter((p) => p.joinKey.length === 32);
    const sealed = this.sealedNow();
    if (peers.length === 0) {
      if (sealed.unlockShares) await this.writeSealed((s) => void (s.unlockShares = undefined));
      this.options.board.report(SERVICE, "local-key", "the only consensus member: its own disk unlocks it; a second consensus member turns sharing on");
      return "settled";
    }
    const holders = peers.map((p) => p.id).sort();
    const threshold = effectiveThreshold(configured, holders.length);
    const committed = sealed.unlockShares;
    const summary = `any ${threshold} of ${holders.length} other consensus members unlock it: ${holders.join(", ")}`;
    if (committed && committed.threshold === threshold && committed.holders.join(",") === holders.join(",")) {
      await this.release(committed.releasing);
      if (sealed.coldStartClusterUnlockKey.length > 0) {
        await this.writeSealed((s) => void (s.coldStartClusterUnlockKey = new Uint8Array()));
        await this.scrub();
      }
      this.options.board.report(SERVICE, "shared", summary);
      return "settled";
    }
    return this.split(peers, threshold, committed?.epoch ?? 0n, summary);
  }

  private async split(peers: Peer[], threshold: number, committedEpoch: bigint, summary: string): Promise<Outcome> {
    const epoch = committedEpoch + 1n;
    // A retry goes on with the same split, to the holders that have not
    // taken theirs yet; a new split only when the holders or the threshold change.
    const key = `${peers.map((p) => `${p.id}@${p.host}`).join(",")}|${threshold}|${epoch}`;
    if (this.attempt?.key !== key) {
      const made = await splitClusterHalf({
        clusterHalf: this.membership.clusterUnlockKey,
        nodeUnlockKey: this.sealedNow().nodeUnlockKey,
        owner: this.ownId,
        holders: peers.map((p) => ({ id: p.id, joinKey: p.joinKey })),
        threshold,
        epoch,
      });
      this.attempt = { key, shares: new Map(made.map((m) => [m.holder, m.sealedShare])), acknowledged: new Set() };
    }
    const current = this.attempt;
    const failed = await this.handOut(
      current,
      { epoch, committed: committedEpoch },
      peers.filter((p) => !current.acknowledged.has(p.id)),
    );
    if (failed.length > 0) {
      this.ctx.signal.throwIfAborted();
      const message = `making shares: ${peers.length - failed.length} of ${peers.length} holders have theirs; waiting for ${failed.map((f) => `${f.peer} (${f.reason})`).join("; ")}`;
      this.options.board.report(SERVICE, "sharing", message);
      this.ctx.logger.warn("not every holder took its cold-start share; retrying", { epoch: String(epoch), missing: failed.map((f) => f.peer).join(",") });
      return "retry";
    }
    const previous = this.sealedNow();
    const hadKey = previous.coldStartClusterUnlockKey.length > 0;
    // Holders of earlier splits that this one leaves out: told to drop their shares below.
    const releasing: Record<string, string> = { ...previous.unlockShares?.releasing };
    for (const [id, address] of Object.entries(previous.unlockShares?.holderAddresses ?? {})) releasing[id] = address;
    for (const peer of peers) delete releasing[peer.id];
    await this.writeSealed((s) => {
      s.unlockShares = create(UnlockSharesSchema, {
        epoch,
        threshold,
        holders: peers.map((p) => p.id).sort(),
        holderAddresses: Object.fromEntries(peers.map((p) => [p.id, p.host])),
        releasing,
      });
      s.coldStartClusterUnlockKey = new Uint8Array();
    });
    if (hadKey) await this.scrub();
    this.ctx.logger.info("cold-start shares made; the cluster half is off the ESP", { epoch: String(epoch), threshold, holders: peers.length });
    this.options.board.report(SERVICE, "shared", summary);
    // Let the holders drop the older split: best effort, the next split tells them again.
    this.attempt = undefined;
    const late = await this.handOut(current, { epoch, committed: epoch }, peers);
    if (late.length) this.ctx.logger.debug("some holders did not hear that the split is committed", { holders: late.map((f) => f.peer).join(",") });
    await this.release(releasing);
    return "settled";
  }

  /**
   * Gives each of `to` its share of the split (HoldShare), saying which
   * epoch is committed so far; returns those that did not take it, and why.
   */
  private async handOut(split: Split, epochs: { epoch: bigint; committed: bigint }, to: Peer[]): Promise<{ peer: string; reason: string }[]> {
    const results = await Promise.all(
      to.map(async (peer) => {
        const client = dialShareHolder(peer.id, peer.host, this.tls, this.options.shareHolderPort);
        try {
          await client.holdShare({ epoch: epochs.epoch, committedEpoch: epochs.committed, sealedShare: split.shares.get(peer.id)! }, { timeoutMs: HOLD_SHARE_TIMEOUT_MS, signal: this.ctx.signal });
          split.acknowledged.add(peer.id);
          return undefined;
        } catch (err) {
          return { peer: peer.id, reason: (err as Error).message };
        } finally {
          client.close();
        }
      }),
    );
    return results.filter((r) => r !== undefined);
  }

  /**
   * Tells holders of earlier splits to drop their shares of this node's
   * key; forgets those that did. Best effort: the rest are asked again at
   * the next change of roles or directory.
   */
  private async release(releasing: Record<string, string>): Promise<void> {
    const told: string[] = [];
    await Promise.all(
      Object.entries(releasing).map(async ([id, host]) => {
        const client = dialShareHolder(id, host, this.tls, this.options.shareHolderPort);
        try {
          await client.releaseShares({}, { timeoutMs: SHARE_CALL_TIMEOUT_MS, signal: this.ctx.signal });
          told.push(id);
        } catch (err) {
          this.ctx.logger.info("could not tell a former holder to drop its share; asking again later", { holder: id, error: (err as Error).message });
        } finally {
          client.close();
        }
      }),
    );
    if (told.length === 0) return;
    await this.writeSealed((s) => {
      if (!s.unlockShares) return;
      for (const id of told) delete s.unlockShares.releasing[id];
    });
    this.ctx.logger.info("former holders dropped their shares of this node's key", { holders: told.sort().join(",") });
  }
}
