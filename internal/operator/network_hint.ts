// A hint for the owner who runs ctl outside the cluster's network: the
// launcher's clusters live in a network namespace of their own, whose
// addresses exist only there, so from the host a connection to them is
// refused, unreachable or unanswered. When a curator could not be reached
// at an address that this machine has no route to (other than a default
// route), the error says so and shows how to run ctl in a namespace.
//
//   /proc/net/route, /proc/net/ipv6_route, interfaces ──▶ routed subnets (BlockList)
//   /run/netns ──▶ namespace names, to put in the hint

import { readFileSync, readdirSync } from "node:fs";
import { BlockList, isIP } from "node:net";
import { endianness, networkInterfaces } from "node:os";

/** Where `ip netns add` names namespaces. */
export const NETNS_DIR = "/run/netns";

/** Route flag: a route that refuses (an "unreachable" route), no way there. */
const RTF_REJECT = 0x0200;

/**
 * The subnets this machine reaches by a route of its own: loopback, its
 * interfaces' subnets, and every route of the kernel's tables that is not a
 * default route. Reads nothing it cannot read (no /proc: interfaces only).
 */
export function routedSubnets(): BlockList {
  const routed = new BlockList();
  routed.addSubnet("127.0.0.0", 8, "ipv4");
  routed.addSubnet("::1", 128, "ipv6");
  for (const addresses of Object.values(networkInterfaces())) {
    for (const a of addresses ?? []) {
      const prefix = Number(a.cidr?.split("/")[1]);
      if (Number.isInteger(prefix) && prefix > 0) routed.addSubnet(a.address.replace(/%.*$/, ""), prefix, a.family === "IPv6" ? "ipv6" : "ipv4");
    }
  }
  for (const route of ipv4Routes(readOr("/proc/net/route"))) routed.addSubnet(route.address, route.prefix, "ipv4");
  for (const route of ipv6Routes(readOr("/proc/net/ipv6_route"))) routed.addSubnet(route.address, route.prefix, "ipv6");
  return routed;
}

/** The non-default, non-reject routes of /proc/net/route (hex, in host byte order). */
export function ipv4Routes(table: string, littleEndian = endianness() === "LE"): { address: string; prefix: number }[] {
  return table
    .split("\n")
    .slice(1)
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length >= 8 && (parseInt(f[3]!, 16) & RTF_REJECT) === 0)
    .map((f) => ({ address: dotted(f[1]!, littleEndian), prefix: bitCount(parseInt(f[7]!, 16)) }))
    .filter((r) => r.prefix > 0);
}

/** The non-default, non-reject routes of /proc/net/ipv6_route. */
export function ipv6Routes(table: string): { address: string; prefix: number }[] {
  return table
    .split("\n")
    .map((line) => line.trim().split(/\s+/))
    .filter((f) => f.length >= 10 && /^[0-9a-f]{32}$/i.test(f[0]!) && (parseInt(f[8]!, 16) & RTF_REJECT) === 0)
    .map((f) => ({ address: f[0]!.match(/.{4}/g)!.join(":"), prefix: parseInt(f[1]!, 16) }))
    .filter((r) => r.prefix > 0);
}

/** Whether an IP address is on a network this machine has a route of its own to; names (not IPs) count as routable. */
export function isRoutableFromHere(host: string, routed: BlockList = routedSubnets()): boolean {
  const family = isIP(host);
  if (family === 0) return true;
  return routed.check(host, family === 6 ? "ipv6" : "ipv4");
}

/** The network namespaces named on this machine. */
export function networkNamespaces(dir = NETNS_DIR): string[] {
  try {
    return readdirSync(dir).sort();
  } catch {
    return [];
  }
}

/**
 * The hint for curators at `hosts` that could not be reached, if any of
 * them is an address this machine has no route of its own to; undefined
 * otherwise.
 */
export interface NamespaceHintOptions {
  /** The subnets routed here (default: routedSubnets()). */
  routed?: BlockList;
  /** The namespaces to name (default: networkNamespaces()). */
  namespaces?: readonly string[];
}

export function namespaceHint(hosts: readonly string[], options: NamespaceHintOptions = {}): string | undefined {
  const routed = options.routed ?? routedSubnets();
  const unrouted = [...new Set(hosts)].filter((h) => !isRoutableFromHere(h, routed));
  if (unrouted.length === 0) return undefined;
  const namespaces = options.namespaces ?? networkNamespaces();
  const name = namespaces.length === 1 ? namespaces[0] : "<namespace>";
  const here = namespaces.length > 1 ? ` (namespaces here: ${namespaces.join(", ")})` : "";
  const which = unrouted.length === 1 ? `${unrouted[0]} is on no network` : `${unrouted.join(", ")} are on no network`;
  return `${which} this machine has a route to (other than a default route): if the cluster runs in a network namespace, run ctl there: ip netns exec ${name} ctl ...${here}`;
}

function readOr(path: string): string {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return "";
  }
}

function dotted(hex: string, littleEndian: boolean): string {
  const bytes = (hex.padStart(8, "0").match(/../g) ?? []).map((b) => parseInt(b, 16));
  return (littleEndian ? bytes.reverse() : bytes).join(".");
}

function bitCount(n: number): number {
  let count = 0;
  for (let v = n >>> 0; v; v >>>= 1) count += v & 1;
  return count;
}
