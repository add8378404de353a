// The curator directory: which nodes serve the cluster's control service,
// and where. Built by the cluster from its own records of consensus members
// (the role it granted, with the address fixed at the grant), never from a
// node's report about itself ("running curator", its external address).

import { create } from "@bufbuild/protobuf";
import { ClusterDirectorySchema, type ClusterDirectory, type NodeRoles } from "../../../proto/gen/common/common_pb.ts";

/** Where a consensus member serves, as the cluster recorded it when it granted the role. */
export function consensusAddressOf(node: { id: string; roles?: NodeRoles | undefined }): string | undefined {
  const member = node.roles?.consensusMember;
  if (!member) return undefined;
  if (member.address) return member.address;
  // Roles granted before the address was recorded: the member's own peer URL.
  const own = member.peers.find((p) => p.name === node.id);
  if (!own) return undefined;
  try {
    const host = new URL(own.url).hostname;
    return host.startsWith("[") ? host.slice(1, -1) : host;
  } catch {
    return undefined;
  }
}

/**
 * Every consensus member and its recorded address, sorted by node ID.
 * Serves both the curator (from its records) and the role server (from
 * what Watch sends).
 */
export function directoryOf(nodes: readonly { id: string; publicKey: Uint8Array; joinKey?: Uint8Array; roles?: NodeRoles | undefined }[]): ClusterDirectory {
  return create(ClusterDirectorySchema, {
    nodes: nodes
      .flatMap((n) => {
        const address = consensusAddressOf(n);
        return address ? [{ id: n.id, publicKey: n.publicKey, joinKey: n.joinKey ?? new Uint8Array(), address }] : [];
      })
      .sort((a, b) => a.id.localeCompare(b.id))
      .map((n) => ({ publicKey: n.publicKey, joinKey: n.joinKey, addresses: [{ host: n.address }] })),
  });
}
