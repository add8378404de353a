// The etcd member state on the data partition: what a restart reads back.

import { describe, expect, test } from "bun:test";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createEtcdCA, issueMemberCertificate, peerUrl } from "../consensus/mod.ts";
import { storageLayout } from "../localstorage/mod.ts";
import { generateKeyPair } from "../pki/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { loadEtcdMemberState, saveEtcdMemberState, type EtcdMemberState } from "./etcd_member_state.ts";

function memberState(): EtcdMemberState {
  const caKey = generateKeyPair();
  const ca = { certificate: createEtcdCA(caKey), privateKey: caKey.privateKey };
  const key = generateKeyPair();
  return {
    ca: ca.certificate,
    certificate: issueMemberCertificate(ca, key.publicKey, { name: "node-a", addresses: ["10.0.0.1"] }),
    initialCluster: [{ name: "node-a", peerUrl: peerUrl("10.0.0.1") }],
    clusterState: "new",
  };
}

describe("etcd member state", () => {
  test("keeps the member count the node last saw across a restart", () => {
    using dir = tempDir();
    const layout = storageLayout(dir.path);
    const state = memberState();
    saveEtcdMemberState(layout, state);
    expect(loadEtcdMemberState(layout)?.lastSeenMembers).toBeUndefined();
    saveEtcdMemberState(layout, { ...state, lastSeenMembers: 3 });
    const loaded = loadEtcdMemberState(layout)!;
    expect(loaded.lastSeenMembers).toBe(3);
    expect(loaded.initialCluster).toEqual(state.initialCluster);
    expect(loaded.certificate.fingerprint256).toBe(state.certificate.fingerprint256);
  });

  test("a recovery's flag survives a restart until it is cleared", () => {
    using dir = tempDir();
    const layout = storageLayout(dir.path);
    saveEtcdMemberState(layout, { ...memberState(), forceNewCluster: true });
    expect(loadEtcdMemberState(layout)?.forceNewCluster).toBe(true);
    saveEtcdMemberState(layout, { ...memberState(), forceNewCluster: false });
    expect(loadEtcdMemberState(layout)?.forceNewCluster).toBeUndefined();
  });

  test("a corrupt file is named in the error", () => {
    using dir = tempDir();
    const layout = storageLayout(dir.path);
    saveEtcdMemberState(layout, memberState());
    const path = join(layout.data.etcd.path, "member.json");
    writeFileSync(path, "{not json");
    expect(() => loadEtcdMemberState(layout)).toThrow(`etcd member state ${path} is empty or corrupt`);
  });
});
