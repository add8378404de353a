// Node parameters, as `ctl params` writes them for a new node's ESP:
// bootstrap a cluster owned by the owner key, register with this cluster
// (the ticket and the cluster's directory and CA, asked of the curator), or
// restore a cluster from a backup (RestorePlan, backup.ts). The file holds
// the ticket or every key of the cluster: readable by its owner only.

import { create, toBinary } from "@bufbuild/protobuf";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { NodeParametersSchema, type NodeParameters } from "../../proto/gen/api/configuration_pb.ts";
import { rawPublicKey, type KeyPair } from "../pki/mod.ts";
import type { RestorePlan } from "./backup.ts";
import { writeOwnerOnly, type OwnerCredentials } from "./config_dir.ts";
import { withFailover } from "./connection.ts";
import type { CallSettings } from "./nodes.ts";

/** Parameters that bootstrap a new cluster owned by `owner`; a threshold of 0 lets the node take a majority. */
export function bootstrapParameters(owner: KeyPair, unlockShareThreshold: number, timeServers: readonly string[]): NodeParameters {
  return create(NodeParametersSchema, {
    cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(owner.publicKey), unlockShareThreshold } },
    timeServers: [...timeServers],
  });
}

/** Parameters that register a new node with the cluster: a register ticket, its directory and its CA, as the curator gives them. */
export async function registerParameters(credentials: OwnerCredentials, settings: CallSettings, timeServers: readonly string[]): Promise<NodeParameters> {
  const { ticket, info } = await withFailover(
    Management,
    credentials,
    async (m) => ({ ticket: (await m.getRegisterTicket({}, settings)).ticket, info: await m.getClusterInfo({}, settings) }),
    settings.progress,
  );
  return create(NodeParametersSchema, {
    cluster: { case: "clusterRegister", value: { registerTicket: ticket, ...(info.clusterDirectory ? { clusterDirectory: info.clusterDirectory } : {}), caCertificate: info.caCertificate } },
    timeServers: [...timeServers],
  });
}

/** Parameters that create the cluster again from a backup read with the owner's key (readForRestore). */
export function restoreParameters(owner: KeyPair, plan: RestorePlan, timeServers: readonly string[]): NodeParameters {
  const restore = {
    ownerPublicKey: rawPublicKey(owner.publicKey),
    snapshot: plan.snapshot,
    caCertificate: new Uint8Array(plan.ca.raw),
    ...(plan.signature ? { backupHeader: new Uint8Array(plan.headerBytes), signature: new Uint8Array(plan.signature) } : {}),
  };
  return create(NodeParametersSchema, { cluster: { case: "clusterRestore", value: restore }, timeServers: [...timeServers] });
}

/** Writes parameters to `file`, readable by the owner only (they carry a ticket, or the cluster's keys). */
export function writeParameters(file: string, params: NodeParameters): void {
  writeOwnerOnly(file, toBinary(NodeParametersSchema, params));
}
