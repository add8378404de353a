// What this node remembers about its etcd membership, on the data partition:
// enough to restart its member without asking anyone (a cold start), and
// to know whether it has to leave when the consensus role goes away.

import { X509Certificate } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { writeFileDurably, type StorageLayout } from "../localstorage/mod.ts";
import type { EtcdPeer } from "../consensus/mod.ts";

export interface EtcdMemberState {
  ca: X509Certificate;
  certificate: X509Certificate;
  /** The members this node started with ("new" for the first node, "existing" for the others). */
  initialCluster: EtcdPeer[];
  clusterState: "new" | "existing";
  /**
   * How many members etcd listed when this node last looked (its status
   * loop records every change). It chooses the raft timing of the member's
   * next start (raftTimingFor); until first recorded, initialCluster's size.
   */
  lastSeenMembers?: number;
  /**
   * Set by a recovery from a lost quorum until it is done: the member starts
   * as a one-member cluster from its own data, and the other nodes lose the
   * consensus role (consensus_recovery.ts).
   */
  forceNewCluster?: boolean;
}

const STATE_FILE = "member.json";

function statePath(layout: StorageLayout): string {
  return join(layout.data.etcd.path, STATE_FILE);
}

export function loadEtcdMemberState(layout: StorageLayout): EtcdMemberState | undefined {
  const path = statePath(layout);
  if (!existsSync(path)) return undefined;
  try {
    const json = JSON.parse(readFileSync(path, "utf8"));
    return {
      ca: new X509Certificate(Buffer.from(json.ca, "base64")),
      certificate: new X509Certificate(Buffer.from(json.certificate, "base64")),
      initialCluster: json.initialCluster,
      clusterState: json.clusterState,
      ...(typeof json.lastSeenMembers === "number" ? { lastSeenMembers: json.lastSeenMembers } : {}),
      ...(json.forceNewCluster === true ? { forceNewCluster: true } : {}),
    };
  } catch (err) {
    throw new Error(`etcd member state ${path} is empty or corrupt: ${(err as Error).message}`, { cause: err });
  }
}

export function saveEtcdMemberState(layout: StorageLayout, state: EtcdMemberState): void {
  mkdirSync(layout.data.etcd.path, { recursive: true, mode: 0o700 });
  writeFileDurably(
    statePath(layout),
    JSON.stringify({
      ca: state.ca.raw.toString("base64"),
      certificate: state.certificate.raw.toString("base64"),
      initialCluster: state.initialCluster,
      clusterState: state.clusterState,
      lastSeenMembers: state.lastSeenMembers,
      ...(state.forceNewCluster ? { forceNewCluster: true } : {}),
    }),
    { mode: 0o600 },
  );
}

/** Forgets the membership and deletes the member's data (after leaving etcd, or before joining anew). */
export function clearEtcdMember(layout: StorageLayout): void {
  rmSync(layout.data.etcd.data, { recursive: true, force: true });
  rmSync(statePath(layout), { force: true });
}
