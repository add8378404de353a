// One run of the control plane (worker_controlplane.ts): the decided etcd
// member, and what its parts share while it runs. The etcd child
// (controlplane_etcd.ts) and the consensus child (controlplane_consensus.ts)
// read and change it; the run itself (runControlPlane) waits on `restart`.
//
//   member ── member.json's content: a recovery, a new member count and a
//             finished recovery change it while the member runs (saveMember)
//   memberClient ── the member's client from etcd's spawn to its exit
//   serving ─────── the member's client once it serves (the consensus child waits)
//   leave ───────── aborted when the node loses the consensus role: the
//                   curator stops first, while etcd still serves
//   restart ─────── why the control plane starts over and decides again

import type { Etcd3 } from "etcd3";
import type { KeyObject, X509Certificate } from "node:crypto";
import type { ClusterMembership, PendingBootstrap } from "../cluster/mod.ts";
import { CURATOR_PORT } from "../curator/client/mod.ts";
import { Value } from "../event/mod.ts";
import { saveEtcdMemberState, type EtcdMemberState } from "./etcd_member_state.ts";
import type { ControlPlaneOptions } from "./worker_controlplane.ts";

export class ControlPlaneRun {
  /** What member.json says (saveMember changes both). */
  member: EtcdMemberState;
  /** The bootstrap still to write once etcd serves; undefined once written. */
  bootstrap: PendingBootstrap | undefined;
  /** Where the member's client port listens. */
  readonly etcdClientHost: string;
  /** The member's TLS identity under the etcd peer CA. */
  readonly tls: { ca: X509Certificate; certificate: X509Certificate; privateKey: KeyObject };
  /** The curator's port. */
  readonly port: number;
  /** The running member's client, from its spawn to its exit (the etcd child's). */
  readonly memberClient = new Value<(() => Promise<Etcd3>) | undefined>();
  /** The member's client once it serves: what the consensus child waits for. */
  readonly serving = new Value<Etcd3 | undefined>();
  /** Why the control plane must start over and decide again. */
  readonly restart = new Value<string>();
  /** Stops the curator early, while etcd still serves, when the node leaves consensus. */
  readonly leave = new AbortController();

  constructor(
    readonly options: ControlPlaneOptions,
    readonly membership: ClusterMembership,
    member: EtcdMemberState,
    bootstrap: PendingBootstrap | undefined,
    /** Called once the bootstrap is in etcd (and its file is gone). */
    private readonly bootstrapWritten: () => void,
  ) {
    this.member = member;
    this.bootstrap = bootstrap;
    this.etcdClientHost = options.etcdClientHost(membership);
    this.tls = { ca: member.ca, certificate: member.certificate, privateKey: membership.credentials.privateKey };
    this.port = options.curatorPort ?? CURATOR_PORT;
  }

  /** The node's ID, its etcd member's name. */
  get nodeId(): string {
    return this.membership.credentials.nodeId;
  }

  /** Changes what member.json says, on disk too: the member's next start reads it. */
  saveMember(change: Partial<EtcdMemberState>): void {
    this.member = { ...this.member, ...change };
    saveEtcdMemberState(this.options.layout, this.member);
  }

  /** The bootstrap is in etcd: neither a restarted group nor a restarted control plane writes it again. */
  markBootstrapWritten(): void {
    this.bootstrap = undefined;
    this.bootstrapWritten();
  }
}
