// Links and routes over rtnetlink (netlink.ts): what the cluster network
// needs beyond the ioctls of interface_config.ts, which cannot create a
// link of a kind (wireguard) nor name an interface for a route on its own.
// (Links are set up and given addresses by those ioctls: setLinkUp, setAddress.)

import { attr, concat, decodeAttributes, NETLINK_ROUTE, NetlinkError, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REPLACE, NLM_F_REQUEST, encodeAttributes, withNetlink } from "./netlink.ts";

const RTM_NEWLINK = 16;
const RTM_DELLINK = 17;
const RTM_GETLINK = 18;
const RTM_NEWROUTE = 24;
const RTM_DELROUTE = 25;
const RTM_GETROUTE = 26;
const IFLA_IFNAME = 3;
const IFLA_LINKINFO = 18;
const IFLA_INFO_KIND = 1;
const RTA_DST = 1;
const RTA_OIF = 4;
const RT_TABLE_MAIN = 254;
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

/** An IPv4 route of ours: a prefix through a link. */
export interface LinkRoute {
  /** "10.244.3.0/24" */
  prefix: string;
  ifindex: number;
}

function rtmsg(dstLength: number, scope = RT_SCOPE_LINK, protocol = RTPROT_NODECORE): Uint8Array {
  return Uint8Array.of(AF_INET, dstLength, 0, 0, RT_TABLE_MAIN, protocol, scope, RTN_UNICAST, 0, 0, 0, 0);
}

function routeAttributes(route: LinkRoute): { length: number; attributes: Uint8Array } {
  const [address, length] = route.prefix.split("/");
  const octets = address!.split(".").map(Number);
  return { length: Number(length), attributes: encodeAttributes([attr.bytes(RTA_DST, Uint8Array.from(octets)), attr.u32(RTA_OIF, route.ifindex)]) };
}

/** Adds `route`, or replaces the route to the same prefix. */
export function replaceRoute(route: LinkRoute): void {
  const { length, attributes } = routeAttributes(route);
  withNetlink(NETLINK_ROUTE, (nl) => {
    nl.request(`routing ${route.prefix} to link ${route.ifindex}`, { type: RTM_NEWROUTE, flags: NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_REPLACE, payload: concat([rtmsg(length), attributes]) });
  });
}

/** Deletes `route`; a route that is not there is no error. */
export function deleteRoute(route: LinkRoute): void {
  const { length, attributes } = routeAttributes(route);
  withNetlink(NETLINK_ROUTE, (nl) => {
    try {
      nl.request(`removing the route to ${route.prefix}`, { type: RTM_DELROUTE, flags: NLM_F_REQUEST | NLM_F_ACK, payload: concat([rtmsg(length), attributes]) });
    } catch (err) {
      if (err instanceof NetlinkError && err.errno === ESRCH) return;
      throw err;
    }
  });
}

/** The IPv4 routes of the main table that the node core added (RTPROT_NODECORE) through link `ifindex`. */
export function ourRoutes(ifindex: number): LinkRoute[] {
  return withNetlink(NETLINK_ROUTE, (nl) => {
    const answers = nl.request("listing routes", { type: RTM_GETROUTE, flags: NLM_F_REQUEST | NLM_F_DUMP, payload: rtmsg(0, 0, 0) });
    const routes: LinkRoute[] = [];
    for (const answer of answers) {
      const p = answer.payload;
      if (p[0] !== AF_INET || p[4] !== RT_TABLE_MAIN || p[5] !== RTPROT_NODECORE) continue;
      const attributes = decodeAttributes(p.subarray(12));
      const oif = attributes.get(RTA_OIF)?.[0];
      const dst = attributes.get(RTA_DST)?.[0];
      if (!oif || !dst || dst.length !== 4) continue;
      const index = new DataView(oif.buffer, oif.byteOffset).getUint32(0, true);
      if (index !== ifindex) continue;
      routes.push({ prefix: `${[...dst].join(".")}/${p[1]}`, ifindex });
    }
    return routes;
  });
}
