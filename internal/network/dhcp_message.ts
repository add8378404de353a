// DHCP messages (RFC 2131) and their options (RFC 2132) as data, and their
// wire form. Pure functions: no sockets, no clocks.
//
//   0                   1                   2                   3
//   +---------------+---------------+---------------+---------------+
//   |  op (1)       |  htype (1)    |  hlen (1)     |  hops (1)     |
//   |                           xid (4)                             |
//   |          secs (2)             |          flags (2)            |
//   |  ciaddr (4) | yiaddr (4) | siaddr (4) | giaddr (4)             |
//   |  chaddr (16) | sname (64) | file (128)                          |
//   |  magic cookie 99.130.83.99 | options (code, length, data)… end |
//   +---------------------------------------------------------------+
//
// Decoding is strict about what the client relies on (the fixed header, the
// cookie, the lengths of the options it reads) and ignores options it does not
// know. It honours option overload (52: options continued in file/sname) and
// long-option concatenation (RFC 3396: one code appearing several times).

import { formatIPv4, ipv4Bytes } from "./ipv4.ts";

export class DhcpDecodeError extends Error {
  override name = "DhcpDecodeError";
}

export const DHCP_SERVER_PORT = 67;
export const DHCP_CLIENT_PORT = 68;

/** Size of the fixed BOOTP header, before the magic cookie. */
export const DHCP_HEADER_LENGTH = 236;
/** BOOTP relays and some servers drop messages shorter than a BOOTP packet. */
export const DHCP_MIN_MESSAGE_LENGTH = 300;
const MAGIC_COOKIE = 0x63825363;
const HTYPE_ETHERNET = 1;
const FLAG_BROADCAST = 0x8000;
const CHADDR_LENGTH = 16;
const SNAME_OFFSET = 44;
const SNAME_LENGTH = 64;
const FILE_OFFSET = 108;
const FILE_LENGTH = 128;

export type DhcpMessageType = "discover" | "offer" | "request" | "decline" | "ack" | "nak" | "release" | "inform";
const MESSAGE_TYPES: readonly DhcpMessageType[] = ["discover", "offer", "request", "decline", "ack", "nak", "release", "inform"];

/** Option codes this package reads or writes (RFC 2132). */
export const DhcpOption = {
  pad: 0,
  subnetMask: 1,
  router: 3,
  dnsServer: 6,
  hostname: 12,
  domainName: 15,
  ntpServer: 42,
  requestedAddress: 50,
  leaseTime: 51,
  overload: 52,
  messageType: 53,
  serverId: 54,
  parameterRequestList: 55,
  message: 56,
  maxMessageSize: 57,
  renewalTime: 58,
  rebindingTime: 59,
  clientId: 61,
  end: 255,
} as const;

/** The options a DHCP message carries, decoded. Absent options are undefined. */
export interface DhcpOptions {
  messageType?: DhcpMessageType;
  subnetMask?: string;
  routers?: string[];
  dnsServers?: string[];
  /** Option 42: NTP servers, in order of preference. */
  ntpServers?: string[];
  hostname?: string;
  domainName?: string;
  requestedAddress?: string;
  /** Seconds; 0xffffffff means infinite. */
  leaseSeconds?: number;
  serverId?: string | undefined;
  parameterRequestList?: number[];
  /** A server's explanation, usually with a NAK. */
  message?: string;
  maxMessageSize?: number;
  /** T1 and T2, in seconds. */
  renewalSeconds?: number;
  rebindingSeconds?: number;
  clientId?: Uint8Array;
}

export interface DhcpMessage {
  op: "request" | "reply";
  /** Transaction id: a reply carries the id of the request it answers. */
  xid: number;
  /** Seconds since the client began acquiring or renewing. */
  secs: number;
  /** Asks the server to broadcast its reply (a client without an address cannot receive unicast). */
  broadcast: boolean;
  /** The client's current address, when it has one it can receive on (renewing, rebinding). */
  ciaddr: string;
  /** "Your" address: the one the server offers or assigns. */
  yiaddr: string;
  /** The next server to use in bootstrap. */
  siaddr: string;
  /** The relay agent's address. */
  giaddr: string;
  /** The client's hardware (MAC) address. */
  chaddr: Uint8Array;
  options: DhcpOptions;
}

/** The wire form of a message, padded to DHCP_MIN_MESSAGE_LENGTH. */
export function encodeDhcpMessage(message: DhcpMessage): Uint8Array {
  if (message.chaddr.byteLength > CHADDR_LENGTH) {
    throw new RangeError(`chaddr of ${message.chaddr.byteLength} bytes is longer than ${CHADDR_LENGTH}`);
  }
  const options = encodeOptions(message.options);
  const length = Math.max(DHCP_MIN_MESSAGE_LENGTH, DHCP_HEADER_LENGTH + 4 + options.byteLength);
  const out = new Uint8Array(length);
  const view = new DataView(out.buffer);
  out[0] = message.op === "request" ? 1 : 2;
  out[1] = HTYPE_ETHERNET;
  out[2] = message.chaddr.byteLength;
  out[3] = 0;
  view.setUint32(4, message.xid >>> 0);
  view.setUint16(8, message.secs);
  view.setUint16(10, message.broadcast ? FLAG_BROADCAST : 0);
  out.set(ipv4Bytes(message.ciaddr), 12);
  out.set(ipv4Bytes(message.yiaddr), 16);
  out.set(ipv4Bytes(message.siaddr), 20);
  out.set(ipv4Bytes(message.giaddr), 24);
  out.set(message.chaddr, 28);
  view.setUint32(DHCP_HEADER_LENGTH, MAGIC_COOKIE);
  out.set(options, DHCP_HEADER_LENGTH + 4);
  return out;
}

function encodeOptions(options: DhcpOptions): Uint8Array {
  const parts: number[] = [];
  const put = (code: number, data: Uint8Array | number[]) => {
    // Longer values are split into several options of one code (RFC 3396).
    const bytes = [...data];
    for (let offset = 0; offset === 0 || offset < bytes.length; offset += 255) {
      const chunk = bytes.slice(offset, offset + 255);
      parts.push(code, chunk.length, ...chunk);
    }
  };
  const addresses = (list: string[]) => list.flatMap((a) => [...ipv4Bytes(a)]);
  const u32 = (value: number) => [(value >>> 24) & 0xff, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff];
  const text = (value: string) => new TextEncoder().encode(value);

  // The message type goes first, as servers and captures expect.
  if (options.messageType !== undefined) put(DhcpOption.messageType, [MESSAGE_TYPES.indexOf(options.messageType) + 1]);
  if (options.subnetMask !== undefined) put(DhcpOption.subnetMask, addresses([options.subnetMask]));
  if (options.routers !== undefined) put(DhcpOption.router, addresses(options.routers));
  if (options.dnsServers !== undefined) put(DhcpOption.dnsServer, addresses(options.dnsServers));
  if (options.ntpServers !== undefined) put(DhcpOption.ntpServer, addresses(options.ntpServers));
  if (options.hostname !== undefined) put(DhcpOption.hostname, text(options.hostname));
  if (options.domainName !== undefined) put(DhcpOption.domainName, text(options.domainName));
  if (options.requestedAddress !== undefined) put(DhcpOption.requestedAddress, addresses([options.requestedAddress]));
  if (options.leaseSeconds !== undefined) put(DhcpOption.leaseTime, u32(options.leaseSeconds));
  if (options.serverId !== undefined) put(DhcpOption.serverId, addresses([options.serverId]));
  if (options.parameterRequestList !== undefined) put(DhcpOption.parameterRequestList, options.parameterRequestList);
  if (options.message !== undefined) put(DhcpOption.message, text(options.message));
  if (options.maxMessageSize !== undefined) put(DhcpOption.maxMessageSize, [options.maxMessageSize >> 8, options.maxMessageSize & 0xff]);
  if (options.renewalSeconds !== undefined) put(DhcpOption.renewalTime, u32(options.renewalSeconds));
  if (options.rebindingSeconds !== undefined) put(DhcpOption.rebindingTime, u32(options.rebindingSeconds));
  if (options.clientId !== undefined) put(DhcpOption.clientId, options.clientId);
  parts.push(DhcpOption.end);
  return Uint8Array.from(parts);
}

/** The message in `data`; throws DhcpDecodeError if it is not a well-formed DHCP message. */
export function decodeDhcpMessage(data: Uint8Array): DhcpMessage {
  if (data.byteLength < DHCP_HEADER_LENGTH + 4) {
    throw new DhcpDecodeError(`message of ${data.byteLength} bytes is shorter than a DHCP header`);
  }
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const opCode = data[0];
  if (opCode !== 1 && opCode !== 2) throw new DhcpDecodeError(`unknown op ${opCode}`);
  const hlen = data[2]!;
  if (hlen > CHADDR_LENGTH) throw new DhcpDecodeError(`hardware address length ${hlen} is longer than ${CHADDR_LENGTH}`);
  if (view.getUint32(DHCP_HEADER_LENGTH) !== MAGIC_COOKIE) throw new DhcpDecodeError("missing DHCP magic cookie");

  const raw = new Map<number, number[]>();
  const overload = readOptions(data.subarray(DHCP_HEADER_LENGTH + 4), raw, "options");
  // Option overload: 1 = file holds options, 2 = sname does, 3 = both (file first).
  if (overload & 1) readOptions(data.subarray(FILE_OFFSET, FILE_OFFSET + FILE_LENGTH), raw, "file");
  if (overload & 2) readOptions(data.subarray(SNAME_OFFSET, SNAME_OFFSET + SNAME_LENGTH), raw, "sname");

  return {
    op: opCode === 1 ? "request" : "reply",
    xid: view.getUint32(4),
    secs: view.getUint16(8),
    broadcast: (view.getUint16(10) & FLAG_BROADCAST) !== 0,
    ciaddr: formatIPv4(view.getUint32(12)),
    yiaddr: formatIPv4(view.getUint32(16)),
    siaddr: formatIPv4(view.getUint32(20)),
    giaddr: formatIPv4(view.getUint32(24)),
    chaddr: data.slice(28, 28 + hlen),
    options: decodeOptions(raw),
  };
}

/**
 * Adds the options in `area` to `raw`, concatenating repeated codes, and
 * returns the overload value (option 52) found there, 0 if none.
 */
function readOptions(area: Uint8Array, raw: Map<number, number[]>, where: string): number {
  let overload = 0;
  let i = 0;
  while (i < area.byteLength) {
    const code = area[i]!;
    if (code === DhcpOption.end) return overload;
    if (code === DhcpOption.pad) {
      i++;
      continue;
    }
    const length = area[i + 1];
    if (length === undefined || i + 2 + length > area.byteLength) {
      throw new DhcpDecodeError(`option ${code} in ${where} runs past the end of the message`);
    }
    const value = area.subarray(i + 2, i + 2 + length);
    if (code === DhcpOption.overload) {
      if (length !== 1) throw new DhcpDecodeError(`option 52 (overload) has length ${length}, want 1`);
      overload = value[0]!;
    } else {
      raw.set(code, [...(raw.get(code) ?? []), ...value]);
    }
    i += 2 + length;
  }
  // A missing end option is common enough in the wild to tolerate.
  return overload;
}

const OPTION_NAMES: Record<number, string> = Object.fromEntries(Object.entries(DhcpOption).map(([name, code]) => [code, name]));

function decodeOptions(raw: Map<number, number[]>): DhcpOptions {
  const options: DhcpOptions = {};
  const bytes = (code: number, valid: (length: number) => boolean, want: string): number[] | undefined => {
    const value = raw.get(code);
    if (value === undefined) return undefined;
    if (!valid(value.length)) {
      throw new DhcpDecodeError(`option ${code} (${OPTION_NAMES[code]}) has length ${value.length}, want ${want}`);
    }
    return value;
  };
  const address = (code: number) => {
    const value = bytes(code, (n) => n === 4, "4");
    return value && formatIPv4(u32(value, 0));
  };
  const addresses = (code: number) => {
    const value = bytes(code, (n) => n > 0 && n % 4 === 0, "a multiple of 4");
    return value && Array.from({ length: value.length / 4 }, (_, k) => formatIPv4(u32(value, 4 * k)));
  };
  const seconds = (code: number) => {
    const value = bytes(code, (n) => n === 4, "4");
    return value && u32(value, 0);
  };
  const text = (code: number) => {
    const value = raw.get(code);
    // Some servers NUL-terminate strings; RFC 2132 says they should not.
    return value && new TextDecoder().decode(Uint8Array.from(value)).replace(/\0+$/, "");
  };

  const type = bytes(DhcpOption.messageType, (n) => n === 1, "1");
  if (type !== undefined) {
    const name = MESSAGE_TYPES[type[0]! - 1];
    if (name === undefined) throw new DhcpDecodeError(`unknown message type ${type[0]}`);
    options.messageType = name;
  }
  const set = <K extends keyof DhcpOptions>(key: K, value: DhcpOptions[K] | undefined) => {
    if (value !== undefined) options[key] = value;
  };
  set("subnetMask", address(DhcpOption.subnetMask));
  set("routers", addresses(DhcpOption.router));
  set("dnsServers", addresses(DhcpOption.dnsServer));
  set("ntpServers", addresses(DhcpOption.ntpServer));
  set("hostname", text(DhcpOption.hostname));
  set("domainName", text(DhcpOption.domainName));
  set("requestedAddress", address(DhcpOption.requestedAddress));
  set("leaseSeconds", seconds(DhcpOption.leaseTime));
  set("serverId", address(DhcpOption.serverId));
  set("parameterRequestList", raw.get(DhcpOption.parameterRequestList));
  set("message", text(DhcpOption.message));
  const maxSize = bytes(DhcpOption.maxMessageSize, (n) => n === 2, "2");
  set("maxMessageSize", maxSize && (maxSize[0]! << 8) | maxSize[1]!);
  set("renewalSeconds", seconds(DhcpOption.renewalTime));
  set("rebindingSeconds", seconds(DhcpOption.rebindingTime));
  const clientId = raw.get(DhcpOption.clientId);
  set("clientId", clientId && Uint8Array.from(clientId));
  return options;
}

function u32(bytes: number[], offset: number): number {
  return ((bytes[offset]! << 24) | (bytes[offset + 1]! << 16) | (bytes[offset + 2]! << 8) | bytes[offset + 3]!) >>> 0;
}
