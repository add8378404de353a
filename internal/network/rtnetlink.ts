// Links, routes and routing rules over rtnetlink (netlink.ts): what the
// cluster network needs beyond the ioctls of interface_config.ts, which
// cannot create a link of a kind (wireguard), name an interface for a route
// on its own, put a route in a table other than main, nor add a rule.
// (Links are set up and given addresses by those ioctls: setLinkUp, setAddress.)

import {
  attr,
  concat,
  decodeAttributes,
  NETLINK_ROUTE,
  NetlinkError,
  NLM_F_ACK,
  NLM_F_CREATE,
  NLM_F_DUMP,
  NLM_F_EXCL,
  NLM_F_REPLACE,
  NLM_F_REQUEST,
  encodeAttributes,
  withNetlink,
} from "./netlink.ts";

const RTM_NEWLINK = 16;
const RTM_DELLINK = 17;
const RTM_GETLINK = 18;
const RTM_NEWROUTE = 24;
const RTM_DELROUTE = 25;
const RTM_GETROUTE = 26;
const RTM_NEWRULE = 32;
const RTM_DELRULE = 33;
const RTM_GETRULE = 34;
const IFLA_IFNAME = 3;
const IFLA_LINKINFO = 18;
const IFLA_INFO_KIND = 1;
const RTA_DST = 1;
const RTA_OIF = 4;
const RTA_TABLE = 15;
const FRA_SRC = 2;
const FRA_PRIORITY = 6;
const FRA_TABLE = 15;
const FRA_PROTOCOL = 21;
const FR_ACT_TO_TBL = 1;
export const RT_TABLE_MAIN = 254;
const RT_SCOPE_LINK = 253;
const RTN_UNICAST = 1;
const AF_INET = 2;
const ENOENT = 2;
const ENODEV = 19;
const ESRCH = 3;
const EEXIST = 17;

/**
 * The routes the node core adds carry this protocol number (rtm_protocol),
 * so that it can tell them from everyone else's: the kernel's, DHCP's, the
 * CNI bridge's. Numbers up to RTPROT_STATIC are the kernel's; 99 is unused
 * by iproute2's rt_protos list.
 */
export const RTPROT_NODECORE = 99;

/** struct ifinfomsg (family, type, index, flags, change), all zero: links are named by IFLA_IFNAME. */
function ifinfomsg(): Uint8Array {
  return new Uint8Array(16);
}

/** Creates a link named `name` of `kind` (wireguard, bridge, ...); false if one of that name exists. */
export function createLink(name: string, kind: string): boolean {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      nl.request(`creating link ${name} (${kind})`, {
        type: RTM_NEWLINK,
        flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL,
        payload: concat([ifinfomsg(), encodeAttributes([attr.string(IFLA_IFNAME, name), attr.nested(IFLA_LINKINFO, [attr.string(IFLA_INFO_KIND, kind)])])]),
      });
      return true;
    } catch (err) {
      if (err instanceof NetlinkError && err.errno === EEXIST) return false;
      throw err;
    }
  });
}

/** The index of link `name`, or undefined if there is none. */
export function linkIndex(name: string): number | undefined {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      const [answer] = nl.request(`reading link ${name}`, {
        type: RTM_GETLINK,
        flags: NLM_F_REQUEST | NLM_F_ACK,
        payload: concat([ifinfomsg(), encodeAttributes([attr.string(IFLA_IFNAME, name)])]),
      });
      return answer ? new DataView(answer.payload.buffer, answer.payload.byteOffset).getInt32(4, true) : undefined;
    } catch (err) {
      if (err instanceof NetlinkError && (err.errno === ENODEV || err.errno === ENOENT)) return undefined;
      throw err;
    }
  });
}

/** Deletes link `name`; false if there was none. */
export function deleteLink(name: string): boolean {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      nl.request(`deleting link ${name}`, { type: RTM_DELLINK, flags: NLM_F_REQUEST | NLM_F_ACK, payload: concat([ifinfomsg(), encodeAttributes([attr.string(IFLA_IFNAME, name)])]) });
      return true;
    } catch (err) {
      if (err instanceof NetlinkError && (err.errno === ENODEV || err.errno === ENOENT)) return false;
      throw err;
    }
  });
}

/** An IPv4 route of ours: a prefix through a link, in the main table unless `table` says otherwise. */
export interface LinkRoute {
  /** "10.244.3.0/24" */
  prefix: string;
  ifindex: number;
  /** The routing table (1-252, or RT_TABLE_MAIN, the default). */
  table?: number;
}

function rtmsg(dstLength: number, table: number, scope = RT_SCOPE_LINK, protocol = RTPROT_NODECORE): Uint8Array {
  return Uint8Array.of(AF_INET, dstLength, 0, 0, table, protocol, scope, RTN_UNICAST, 0, 0, 0, 0);
}

/** "10.244.3.0/24" as its address bytes and length. */
function splitPrefix(prefix: string): { octets: Uint8Array; length: number } {
  const [address, length] = prefix.split("/");
  return { octets: Uint8Array.from(address!.split(".").map(Number)), length: Number(length ?? 32) };
}

function routeAttributes(route: LinkRoute): { header: Uint8Array; attributes: Uint8Array } {
  const { octets, length } = splitPrefix(route.prefix);
  const table = route.table ?? RT_TABLE_MAIN;
  return { header: rtmsg(length, table), attributes: encodeAttributes([attr.bytes(RTA_DST, octets), attr.u32(RTA_OIF, route.ifindex), attr.u32(RTA_TABLE, table)]) };
}

/** Adds `route`, or replaces the route to the same prefix. */
export function replaceRoute(route: LinkRoute): void {
  const { header, attributes } = routeAttributes(route);
  withNetlink(NETLINK_ROUTE, (nl) => {
    nl.request(`routing ${route.prefix} to link ${route.ifindex}`, { type: RTM_NEWROUTE, flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, payload: concat([header, attributes]) });
  });
}

/** Deletes `route`; a route that is not there is no error. */
export function deleteRoute(route: LinkRoute): void {
  const { header, attributes } = routeAttributes(route);
  withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      nl.request(`removing the route to ${route.prefix}`, { type: RTM_DELROUTE, flags: NLM_F_REQUEST | NLM_F_ACK, payload: concat([header, attributes]) });
    } catch (err) {
      if (err instanceof NetlinkError && err.errno === ESRCH) return;
      throw err;
    }
  });
}

/** The IPv4 routes of `table` (main by default) that the node core added (RTPROT_NODECORE) through link `ifindex`. */
export function ourRoutes(ifindex: number, table = RT_TABLE_MAIN): LinkRoute[] {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    const answers = nl.request("listing routes", { type: RTM_GETROUTE, flags: NLM_F_REQUEST | NLM_F_DUMP, payload: rtmsg(0, 0, 0, 0) });
    const routes: LinkRoute[] = [];
    for (const answer of answers) {
      const p = answer.payload;
      if (p[0] !== AF_INET || p[5] !== RTPROT_NODECORE) continue;
      const attributes = decodeAttributes(p.subarray(12));
      const inTable = attributes.get(RTA_TABLE)?.[0];
      if ((inTable ? new DataView(inTable.buffer, inTable.byteOffset).getUint32(0, true) : p[4]) !== table) continue;
      const oif = attributes.get(RTA_OIF)?.[0];
      const dst = attributes.get(RTA_DST)?.[0];
      if (!oif || !dst || dst.length !== 4) continue;
      const index = new DataView(oif.buffer, oif.byteOffset).getUint32(0, true);
      if (index !== ifindex) continue;
      routes.push({ prefix: `${[...dst].join(".")}/${p[1]}`, ifindex, ...(table === RT_TABLE_MAIN ? {} : { table }) });
    }
    return routes;
  });
}

/** An IPv4 routing rule of ours: packets from `from` look up `table` first, at `priority`. */
export interface SourceRule {
  /** "10.244.3.0/24" */
  from: string;
  table: number;
  priority: number;
}

function ruleMessage(rule: SourceRule): Uint8Array {
  const { octets, length } = splitPrefix(rule.from);
  // struct fib_rule_hdr: family, dst_len, src_len, tos, table, res1, res2, action, flags (u32).
  const header = Uint8Array.of(AF_INET, 0, length, 0, rule.table, 0, 0, FR_ACT_TO_TBL, 0, 0, 0, 0);
  return concat([header, encodeAttributes([attr.bytes(FRA_SRC, octets), attr.u32(FRA_PRIORITY, rule.priority), attr.u32(FRA_TABLE, rule.table), attr.u8(FRA_PROTOCOL, RTPROT_NODECORE)])]);
}

/** Adds `rule`; false if the same rule is there already. */
export function addRule(rule: SourceRule): boolean {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      nl.request(`adding the rule from ${rule.from} lookup ${rule.table}`, { type: RTM_NEWRULE, flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_EXCL, payload: ruleMessage(rule) });
      return true;
    } catch (err) {
      if (err instanceof NetlinkError && err.errno === EEXIST) return false;
      throw err;
    }
  });
}

/** Deletes `rule`; a rule that is not there is no error. */
export function deleteRule(rule: SourceRule): void {
  withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      nl.request(`removing the rule from ${rule.from} lookup ${rule.table}`, { type: RTM_DELRULE, flags: NLM_F_REQUEST | NLM_F_ACK, payload: ruleMessage(rule) });
    } catch (err) {
      if (err instanceof NetlinkError && (err.errno === ENOENT || err.errno === ESRCH)) return;
      throw err;
    }
  });
}

/** The IPv4 source rules that the node core added (FRA_PROTOCOL RTPROT_NODECORE). */
export function ourRules(): SourceRule[] {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    const answers = nl.request("listing rules", { type: RTM_GETRULE, flags: NLM_F_REQUEST | NLM_F_DUMP, payload: new Uint8Array(12).fill(AF_INET, 0, 1) });
    const rules: SourceRule[] = [];
    for (const answer of answers) {
      const p = answer.payload;
      if (p[0] !== AF_INET) continue;
      const attributes = decodeAttributes(p.subarray(12));
      const protocol = attributes.get(FRA_PROTOCOL)?.[0];
      const src = attributes.get(FRA_SRC)?.[0];
      if (protocol?.[0] !== RTPROT_NODECORE || !src || src.length !== 4) continue;
      const u32 = (type: number) => {
        const value = attributes.get(type)?.[0];
        return value ? new DataView(value.buffer, value.byteOffset).getUint32(0, true) : 0;
      };
      rules.push({ from: `${[...src].join(".")}/${p[2]}`, table: u32(FRA_TABLE) || p[4]!, priority: u32(FRA_PRIORITY) });
    }
    return rules;
  });
}
