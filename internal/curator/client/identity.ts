// What a curator's certificate must prove before a client talks to it.

import type { X509Certificate } from "node:crypto";
import { isIP } from "node:net";
import { CURATOR_ORGANIZATION, canonicalIp, commonNameOf, ipAddressesOf, namesItsOwnKey, organizationOf } from "../../pki/mod.ts";
import type { CuratorEndpoint } from "./endpoint.ts";

/**
 * Why `certificate` (already chained to the cluster CA by TLS) does not
 * prove that a curator of the cluster serves at `endpoint`, or undefined if
 * it does. It must be a curator certificate (only consensus members get
 * one), name the node the caller expects (when it expects one), and name the
 * address the caller dialled.
 */
export function curatorIdentityProblem(certificate: X509Certificate, endpoint: CuratorEndpoint): string | undefined {
  const organization = organizationOf(certificate);
  const name = commonNameOf(certificate);
  if (organization !== CURATOR_ORGANIZATION) {
    return `the server at ${endpoint.host} presented a certificate of '${name}' (${organization ?? "no organization"}), not a curator certificate`;
  }
  if (!namesItsOwnKey(certificate)) {
    return `the curator certificate at ${endpoint.host} names ${name}, which does not match its key`;
  }
  if (endpoint.nodeId !== undefined && name !== endpoint.nodeId) {
    return `expected curator ${endpoint.nodeId} at ${endpoint.host}, but ${name} answered`;
  }
  if (isIP(endpoint.host) && !ipAddressesOf(certificate).includes(canonicalIp(endpoint.host))) {
    return `curator ${name} is certified for ${ipAddressesOf(certificate).join(", ") || "no address"}, not for ${endpoint.host}`;
  }
  return undefined;
}
