// The control plane's start/stop decision as a table: for each combination
// of roles, remembered etcd member and pending bootstrap, what the worker
// does, and that deciding changes none of its inputs.

import { describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { NodeRolesSchema, type NodeRoles } from "../../proto/gen/common/common_pb.ts";
import type { PendingBootstrap } from "../cluster/mod.ts";
import { createEtcdCA, issueMemberCertificate } from "../consensus/mod.ts";
import { generateKeyPair, type CA } from "../pki/mod.ts";
import { testCA } from "../testing/mod.ts";
import { decideControlPlane, type ControlPlaneDecision, type ControlPlaneInputs } from "./controlplane_decision.ts";
import type { EtcdMemberState } from "./etcd_member_state.ts";

const etcdKey = generateKeyPair();
const etcdCA: CA = { certificate: createEtcdCA(etcdKey), privateKey: etcdKey.privateKey };
const clusterCA = testCA();
const peerCertificate = issueMemberCertificate(etcdCA, generateKeyPair().publicKey, { name: "node-b", addresses: ["10.0.0.2"] });

const pending: PendingBootstrap = {
  ownerPublicKey: new Uint8Array(32).fill(1),
  clusterCA,
  etcdCA,
  joinPublicKey: new Uint8Array(32).fill(2),
  clusterUnlockKey: new Uint8Array(32).fill(3),
  unlockShareThreshold: 0,
};

const remembered: EtcdMemberState = {
  ca: etcdCA.certificate,
  certificate: peerCertificate,
  clusterState: "new",
  initialCluster: [{ name: "node-a", peerUrl: "https://10.0.0.1:2380" }],
};

const consensus: NodeRoles = create(NodeRolesSchema, {
  consensusMember: {
    caCertificate: new Uint8Array(etcdCA.certificate.raw),
    peerCertificate: new Uint8Array(peerCertificate.raw),
    peers: [
      { name: "node-a", url: "https://10.0.0.1:2380" },
      { name: "node-b", url: "https://10.0.0.2:2380" },
    ],
  },
});
const noConsensus: NodeRoles = create(NodeRolesSchema, { kubernetesWorker: {} });

const none: ControlPlaneInputs = { roles: undefined, remembered: undefined, pendingBootstrap: undefined, bootstrapWritten: false };

/** The decision without its reason, and members reduced to what tells them apart. */
function summary(decision: ControlPlaneDecision): unknown {
  switch (decision.action) {
    case "create":
      return { action: "create", bootstrap: decision.bootstrap === pending };
    case "resume":
      return { action: "resume", member: decision.member === remembered ? "remembered" : "other", bootstrap: decision.bootstrap === pending };
    case "join":
      return {
        action: "join",
        clusterState: decision.member.clusterState,
        peers: decision.member.initialCluster,
        certificate: decision.member.certificate.fingerprint256 === peerCertificate.fingerprint256,
        ca: decision.member.ca.fingerprint256 === etcdCA.certificate.fingerprint256,
      };
    case "leave":
    case "wait":
      return { action: decision.action };
    default: {
      const unreachable: never = decision;
      return unreachable;
    }
  }
}

const cases: { name: string; inputs: Partial<ControlPlaneInputs>; expected: unknown }[] = [
  {
    name: "a bootstrapping node with no etcd member creates the cluster's etcd, before any roles are known",
    inputs: { pendingBootstrap: pending },
    expected: { action: "create", bootstrap: true },
  },
  {
    name: "a bootstrapping node creates the cluster's etcd whatever the roles say",
    inputs: { pendingBootstrap: pending, roles: noConsensus },
    expected: { action: "create", bootstrap: true },
  },
  {
    name: "a bootstrapping node whose etcd member exists resumes it and still writes the first state",
    inputs: { pendingBootstrap: pending, remembered },
    expected: { action: "resume", member: "remembered", bootstrap: true },
  },
  {
    name: "a bootstrap already written is not written again",
    inputs: { pendingBootstrap: pending, remembered, bootstrapWritten: true },
    expected: { action: "resume", member: "remembered", bootstrap: false },
  },
  {
    name: "a bootstrap already written does not create etcd again after the node left it",
    inputs: { pendingBootstrap: pending, bootstrapWritten: true },
    expected: { action: "wait" },
  },
  {
    name: "a remembered member starts before roles are known (cold start)",
    inputs: { remembered },
    expected: { action: "resume", member: "remembered", bootstrap: false },
  },
  {
    name: "a remembered member with the consensus role resumes instead of joining again",
    inputs: { remembered, roles: consensus },
    expected: { action: "resume", member: "remembered", bootstrap: false },
  },
  {
    name: "a remembered member whose consensus role is gone leaves",
    inputs: { remembered, roles: noConsensus },
    expected: { action: "leave" },
  },
  {
    name: "a bootstrapping node whose consensus role is gone leaves",
    inputs: { pendingBootstrap: pending, remembered, roles: noConsensus },
    expected: { action: "leave" },
  },
  {
    name: "a node given the consensus role joins etcd as an existing cluster with the role's peers",
    inputs: { roles: consensus },
    expected: {
      action: "join",
      clusterState: "existing",
      peers: [
        { name: "node-a", peerUrl: "https://10.0.0.1:2380" },
        { name: "node-b", peerUrl: "https://10.0.0.2:2380" },
      ],
      certificate: true,
      ca: true,
    },
  },
  { name: "a node without roles or a member waits", inputs: {}, expected: { action: "wait" } },
  { name: "a node without the consensus role waits", inputs: { roles: noConsensus }, expected: { action: "wait" } },
];

describe("control plane decision", () => {
  for (const { name, inputs, expected } of cases) {
    test(name, () => {
      const given: ControlPlaneInputs = { ...none, ...inputs };
      const before = { ...given };
      const decision = decideControlPlane(given);
      expect(summary(decision)).toEqual(expected);
      expect(decision.reason).not.toBe("");
      // The inputs are left as they were: no field removed or replaced.
      expect(Object.keys(given)).toEqual(Object.keys(before));
      for (const key of Object.keys(before) as (keyof ControlPlaneInputs)[]) expect(given[key]).toBe(before[key]);
    });
  }

  test("the decision leaves the roles, the remembered member and the pending bootstrap unchanged", () => {
    const rolesBefore = structuredClone(consensus);
    const peersBefore = structuredClone(remembered.initialCluster);
    const pendingKeys = Object.keys(pending);
    decideControlPlane({ ...none, roles: consensus, remembered, pendingBootstrap: pending });
    decideControlPlane({ ...none, roles: consensus, pendingBootstrap: pending });
    decideControlPlane({ ...none, roles: consensus });
    expect(consensus).toEqual(rolesBefore);
    expect(remembered.initialCluster).toEqual(peersBefore);
    expect(Object.keys(pending)).toEqual(pendingKeys);
  });
});
