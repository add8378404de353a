// Curator endpoints: where a curator is, and (when known) which node it is.
// The one place that formats and parses them, IPv4 and IPv6 alike.

import { isIP } from "node:net";
import type { ClusterDirectory } from "../../../proto/gen/common/common_pb.ts";
import { canonicalIp, nodeIdFromPublicKey } from "../../pki/mod.ts";
import { hostPort } from "../../rpc/mod.ts";

/** The port every curator listens on. */
export const CURATOR_PORT = 7835;

export interface CuratorEndpoint {
  /** An IP address (or, typed by a person, a host name). */
  host: string;
  port: number;
  /** The node that must answer there, when the caller knows it. */
  nodeId?: string;
}

export class EndpointError extends Error {
  override name = "EndpointError";
}

const NODE_ID = /^node-[0-9a-f]{16}$/;

/** "10.0.0.2:7835", "[fd00::2]:7835". */
export function formatAddress(endpoint: Pick<CuratorEndpoint, "host" | "port">): string {
  return hostPort(endpoint.host, endpoint.port);
}

/** "node-…@10.0.0.2:7835" when the node is known, else the address alone. */
export function formatEndpoint(endpoint: CuratorEndpoint): string {
  return endpoint.nodeId ? `${endpoint.nodeId}@${formatAddress(endpoint)}` : formatAddress(endpoint);
}

/**
 * Parses what formatEndpoint writes, and what people type: "host",
 * "host:port", "[v6]:port", a bare IPv6 address, each optionally prefixed
 * by "node-…@". A missing port is the curator port.
 */
export function parseEndpoint(text: string, defaultPort = CURATOR_PORT): CuratorEndpoint {
  const trimmed = text.trim();
  let nodeId: string | undefined;
  let rest = trimmed;
  const at = trimmed.indexOf("@");
  if (at >= 0) {
    nodeId = trimmed.slice(0, at);
    rest = trimmed.slice(at + 1);
    if (!NODE_ID.test(nodeId)) throw new EndpointError(`'${text}': '${nodeId}' is not a node ID (node- and 16 hex digits)`);
  }
  let host: string;
  let port = defaultPort;
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(rest);
  if (bracketed) {
    host = bracketed[1]!;
    if (bracketed[2] !== undefined) port = Number(bracketed[2]);
  } else if (isIP(rest) === 6) {
    host = rest;
  } else {
    const colon = rest.lastIndexOf(":");
    host = colon >= 0 ? rest.slice(0, colon) : rest;
    if (colon >= 0) port = Number(rest.slice(colon + 1));
  }
  if (!host || /[\s/@[\]]/.test(host)) throw new EndpointError(`'${text}' is not an endpoint (expected host, host:port or [ipv6]:port)`);
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new EndpointError(`'${text}': port must be 1-65535`);
  return { host: isIP(host) ? canonicalIp(host) : host, port, ...(nodeId ? { nodeId } : {}) };
}

/** Every curator a directory names, with the node each must be. */
export function endpointsOfDirectory(directory: ClusterDirectory | undefined, port = CURATOR_PORT): CuratorEndpoint[] {
  const seen = new Set<string>();
  const out: CuratorEndpoint[] = [];
  for (const node of directory?.nodes ?? []) {
    const nodeId = node.publicKey.length === 32 ? nodeIdFromPublicKey(node.publicKey) : undefined;
    for (const address of node.addresses) {
      const endpoint: CuratorEndpoint = { host: canonicalIp(address.host), port, ...(nodeId ? { nodeId } : {}) };
      const key = formatEndpoint(endpoint);
      if (seen.has(key)) continue;
      seen.add(key);
      out.push(endpoint);
    }
  }
  return out;
}

/** Whether two endpoints name the same place (the node ID aside). */
export function sameAddress(a: CuratorEndpoint, b: CuratorEndpoint): boolean {
  return a.port === b.port && canonicalIp(a.host) === canonicalIp(b.host);
}
