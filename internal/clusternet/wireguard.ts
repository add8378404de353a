// The WireGuard device, configured over generic netlink as wireguard-tools'
// `wg` does (the image has no `wg`): the kernel's "wireguard" family,
// WG_CMD_SET_DEVICE to set the key, port and peers, WG_CMD_GET_DEVICE (a
// dump) to read them back with each peer's last handshake and traffic.
// Attribute numbers are those of include/uapi/linux/wireguard.h.

import {
  attr,
  concat,
  decodeAttributes,
  NETLINK_GENERIC,
  NetlinkError,
  NLM_F_ACK,
  NLM_F_DUMP,
  NLM_F_REQUEST,
  encodeAttributes,
  withNetlink,
  type Attribute,
  type NetlinkSocket,
} from "../network/mod.ts";
import type { Peer } from "./peers.ts";

const GENL_ID_CTRL = 16;
const CTRL_CMD_GETFAMILY = 3;
const CTRL_ATTR_FAMILY_ID = 1;
const CTRL_ATTR_FAMILY_NAME = 2;

const WG_GENL_NAME = "wireguard";
const WG_GENL_VERSION = 1;
const WG_CMD_GET_DEVICE = 0;
const WG_CMD_SET_DEVICE = 1;
const WGDEVICE_A_IFNAME = 2;
const WGDEVICE_A_PRIVATE_KEY = 3;
const WGDEVICE_A_PUBLIC_KEY = 4;
const WGDEVICE_A_LISTEN_PORT = 6;
const WGDEVICE_A_PEERS = 8;
const WGPEER_A_PUBLIC_KEY = 1;
const WGPEER_A_FLAGS = 3;
const WGPEER_A_ENDPOINT = 4;
const WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL = 5;
const WGPEER_A_LAST_HANDSHAKE_TIME = 6;
const WGPEER_A_RX_BYTES = 7;
const WGPEER_A_TX_BYTES = 8;
const WGPEER_A_ALLOWEDIPS = 9;
const WGPEER_F_REMOVE_ME = 1;
const WGPEER_F_REPLACE_ALLOWEDIPS = 2;
const WGALLOWEDIP_A_FAMILY = 1;
const WGALLOWEDIP_A_IPADDR = 2;
const WGALLOWEDIP_A_CIDR_MASK = 3;
const AF_INET = 2;
const ENOENT = 2;

/**
 * Seconds between keepalives to each peer: a peer behind a stateful
 * firewall, or one that rebooted, hears from us within this long without
 * either side sending traffic first.
 */
export const PERSISTENT_KEEPALIVE_S = 25;

/** The family ID the kernel gave generic netlink family `name`; undefined when it has none (module not loaded). */
export function genlFamily(nl: NetlinkSocket, name: string): number | undefined {
  try {
    const [answer] = nl.request(`looking up the ${name} netlink family`, {
      type: GENL_ID_CTRL,
      flags: NLM_F_REQUEST | NLM_F_ACK,
      payload: concat([genlHeader(CTRL_CMD_GETFAMILY, 1), encodeAttributes([attr.string(CTRL_ATTR_FAMILY_NAME, name)])]),
    });
    const id = answer && decodeAttributes(answer.payload.subarray(4)).get(CTRL_ATTR_FAMILY_ID)?.[0];
    return id ? new DataView(id.buffer, id.byteOffset).getUint16(0, true) : undefined;
  } catch (err) {
    if (err instanceof NetlinkError && err.errno === ENOENT) return undefined;
    throw err;
  }
}

function genlHeader(cmd: number, version: number): Uint8Array {
  return Uint8Array.of(cmd, version, 0, 0);
}

/** struct sockaddr_in for "a.b.c.d:port". */
export function sockaddrIn(endpoint: string): Uint8Array {
  const [host, port] = endpoint.split(":");
  const b = new Uint8Array(16);
  const v = new DataView(b.buffer);
  v.setUint16(0, AF_INET, true);
  v.setUint16(2, Number(port), false);
  b.set(host!.split(".").map(Number), 4);
  return b;
}

function allowedIp(prefix: string): Attribute[] {
  const [address, length] = prefix.split("/");
  return [attr.u16(WGALLOWEDIP_A_FAMILY, AF_INET), attr.bytes(WGALLOWEDIP_A_IPADDR, Uint8Array.from(address!.split(".").map(Number))), attr.u8(WGALLOWEDIP_A_CIDR_MASK, Number(length))];
}

/** The attributes of one peer to set (its allowed IPs replaced by the given ones). */
export function peerAttributes(peer: Peer): Attribute[] {
  return [
    attr.bytes(WGPEER_A_PUBLIC_KEY, Buffer.from(peer.publicKey, "base64")),
    attr.u32(WGPEER_A_FLAGS, WGPEER_F_REPLACE_ALLOWEDIPS),
    attr.bytes(WGPEER_A_ENDPOINT, sockaddrIn(peer.endpoint)),
    attr.u16(WGPEER_A_PERSISTENT_KEEPALIVE_INTERVAL, PERSISTENT_KEEPALIVE_S),
    attr.nested(
      WGPEER_A_ALLOWEDIPS,
      peer.allowedIps.map((p) => attr.nested(0, allowedIp(p))),
    ),
  ];
}

/** What to change on the device: its private key and port (when given), peers to set, peers (by base64 key) to remove. */
export interface DeviceChange {
  privateKey?: Uint8Array;
  listenPort?: number;
  set?: readonly Peer[];
  remove?: readonly string[];
}

/** The WG_CMD_SET_DEVICE attributes for `change` on device `name`. */
export function setDeviceAttributes(name: string, change: DeviceChange): Attribute[] {
  const peers: Attribute[] = [
    ...(change.set ?? []).map((p) => attr.nested(0, peerAttributes(p))),
    ...(change.remove ?? []).map((key) => attr.nested(0, [attr.bytes(WGPEER_A_PUBLIC_KEY, Buffer.from(key, "base64")), attr.u32(WGPEER_A_FLAGS, WGPEER_F_REMOVE_ME)])),
  ];
  return [
    attr.string(WGDEVICE_A_IFNAME, name),
    ...(change.privateKey ? [attr.bytes(WGDEVICE_A_PRIVATE_KEY, change.privateKey)] : []),
    ...(change.listenPort !== undefined ? [attr.u16(WGDEVICE_A_LISTEN_PORT, change.listenPort)] : []),
    ...(peers.length ? [attr.nested(WGDEVICE_A_PEERS, peers)] : []),
  ];
}

/** Applies `change` to WireGuard device `name`. */
export function setDevice(name: string, change: DeviceChange): void {
  withNetlink(NETLINK_GENERIC, (nl) => {
    const family = genlFamily(nl, WG_GENL_NAME);
    if (family === undefined) throw new Error("the kernel has no WireGuard (the wireguard module is not loaded)");
    nl.request(`configuring WireGuard device ${name}`, {
      type: family,
      flags: NLM_F_REQUEST | NLM_F_ACK,
      payload: concat([genlHeader(WG_CMD_SET_DEVICE, WG_GENL_VERSION), encodeAttributes(setDeviceAttributes(name, change))]),
    });
  });
}

/** A peer as the device reports it. */
export interface PeerState extends Omit<Peer, "podPrefix"> {
  /** When the last handshake with it completed, ms since the epoch; 0 if none has. */
  lastHandshakeMs: number;
  rxBytes: number;
  txBytes: number;
}

/** The device's public key, port and peers (nodeId left empty: the device does not know node IDs). */
export function readDevice(name: string): { publicKey: string; listenPort: number; peers: PeerState[] } {
  return withNetlink(NETLINK_GENERIC, (nl) => {
    const family = genlFamily(nl, WG_GENL_NAME);
    if (family === undefined) throw new Error("the kernel has no WireGuard (the wireguard module is not loaded)");
    const answers = nl.request(`reading WireGuard device ${name}`, {
      type: family,
      flags: NLM_F_REQUEST | NLM_F_DUMP,
      payload: concat([genlHeader(WG_CMD_GET_DEVICE, WG_GENL_VERSION), encodeAttributes([attr.string(WGDEVICE_A_IFNAME, name)])]),
    });
    return parseDevice(answers.map((a) => a.payload.subarray(4)));
  });
}

/** The device from the attributes of WG_CMD_GET_DEVICE's answers (a large peer list spans several). */
export function parseDevice(parts: readonly Uint8Array[]): { publicKey: string; listenPort: number; peers: PeerState[] } {
  let publicKey = "";
  let listenPort = 0;
  const peers: PeerState[] = [];
  const u16 = (b: Uint8Array) => new DataView(b.buffer, b.byteOffset).getUint16(0, true);
  const u64 = (b: Uint8Array) => Number(new DataView(b.buffer, b.byteOffset).getBigUint64(0, true));
  for (const part of parts) {
    const device = decodeAttributes(part);
    const key = device.get(WGDEVICE_A_PUBLIC_KEY)?.[0];
    if (key) publicKey = Buffer.from(key).toString("base64");
    const port = device.get(WGDEVICE_A_LISTEN_PORT)?.[0];
    if (port) listenPort = u16(port);
    const list = device.get(WGDEVICE_A_PEERS)?.[0];
    if (!list) continue;
    for (const entries of decodeAttributes(list).values()) {
      for (const entry of entries) {
        const peer = decodeAttributes(entry);
        const endpoint = peer.get(WGPEER_A_ENDPOINT)?.[0];
        const handshake = peer.get(WGPEER_A_LAST_HANDSHAKE_TIME)?.[0];
        const allowed: string[] = [];
        for (const ips of decodeAttributes(peer.get(WGPEER_A_ALLOWEDIPS)?.[0] ?? new Uint8Array()).values()) {
          for (const ip of ips) {
            const a = decodeAttributes(ip);
            const address = a.get(WGALLOWEDIP_A_IPADDR)?.[0];
            const mask = a.get(WGALLOWEDIP_A_CIDR_MASK)?.[0];
            if (address?.length === 4 && mask) allowed.push(`${[...address].join(".")}/${mask[0]}`);
          }
        }
        peers.push({
          nodeId: "",
          publicKey: Buffer.from(peer.get(WGPEER_A_PUBLIC_KEY)?.[0] ?? new Uint8Array()).toString("base64"),
          endpoint: endpoint && u16(endpoint) === AF_INET ? `${[...endpoint.subarray(4, 8)].join(".")}:${new DataView(endpoint.buffer, endpoint.byteOffset).getUint16(2, false)}` : "",
          allowedIps: allowed,
          // struct __kernel_timespec: seconds and nanoseconds, 64 bits each.
          lastHandshakeMs: handshake && handshake.length >= 16 ? u64(handshake) * 1000 + Math.floor(u64(handshake.subarray(8)) / 1e6) : 0,
          rxBytes: peer.get(WGPEER_A_RX_BYTES)?.[0] ? u64(peer.get(WGPEER_A_RX_BYTES)![0]!) : 0,
          txBytes: peer.get(WGPEER_A_TX_BYTES)?.[0] ? u64(peer.get(WGPEER_A_TX_BYTES)![0]!) : 0,
        });
      }
    }
  }
  return { publicKey, listenPort, peers };
}
