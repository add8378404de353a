// AAA: the owner proves possession of the owner key (the TLS handshake with
// a certificate for it) and gets an owner certificate under the cluster CA.

import type { AAA } from "../../proto/gen/api/management_pb.ts";
import { issueOwnerCertificate, rawPublicKey } from "../pki/mod.ts";
import { FailedPreconditionError, PermissionDeniedError, type ServiceImpl, type ServicePolicy } from "../rpc/mod.ts";
import type { StateReader } from "./state_cache.ts";

export const AAA_POLICY: ServicePolicy<typeof AAA> = { escrow: "key" };

export function aaaService(state: StateReader): ServiceImpl<typeof AAA> {
  return {
    async escrow(_request, ctx) {
      if (ctx.peer.kind === "anonymous" || ctx.peer.kind === "local") throw new Error("unreachable: the key policy admits only certificate holders");
      const presented = ctx.peer.kind === "key" || ctx.peer.kind === "node" ? ctx.peer.publicKey : rawPublicKey(ctx.peer.certificate.publicKey);
      const snapshot = await state.read(ctx.signal);
      const cluster = snapshot.cluster();
      if (!cluster) throw new FailedPreconditionError("the cluster is not bootstrapped");
      if (!Buffer.from(presented).equals(Buffer.from(cluster.ownerPublicKey))) {
        throw new PermissionDeniedError("the presented key is not the cluster owner's key");
      }
      const ca = snapshot.ca("cluster");
      const certificate = issueOwnerCertificate(ca, ctx.peer.certificate.publicKey);
      return { ownerCertificate: new Uint8Array(certificate.raw), caCertificate: new Uint8Array(ca.certificate.raw) };
    },
  };
}
