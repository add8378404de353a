// IPv4 addresses as this package passes them around: dotted strings in the
// domain ("10.0.0.5"), 32-bit numbers or 4 network-order bytes on the wire,
// and struct sockaddr_in for the socket calls and ioctls.

import { AF_INET } from "../sys/mod.ts";

export class InvalidAddressError extends Error {
  override name = "InvalidAddressError";
}

export const ANY_ADDRESS = "0.0.0.0";
export const BROADCAST_ADDRESS = "255.255.255.255";

/** The 32-bit value of a dotted IPv4 address (0.0.0.0 → 0). */
export function parseIPv4(text: string): number {
  const parts = text.split(".");
  if (parts.length !== 4 || !parts.every((p) => /^\d{1,3}$/.test(p) && Number(p) <= 255)) {
    throw new InvalidAddressError(`invalid IPv4 address ${JSON.stringify(text)}`);
  }
  return parts.reduce((value, part) => value * 256 + Number(part), 0);
}

/** Whether `text` is a dotted IPv4 address, each part 0-255. */
export function isIPv4(text: string): boolean {
  try {
    parseIPv4(text);
    return true;
  } catch {
    return false;
  }
}

/** The dotted form of a 32-bit value. */
export function formatIPv4(value: number): string {
  return [value >>> 24, (value >>> 16) & 0xff, (value >>> 8) & 0xff, value & 0xff].join(".");
}

/** The 4 network-order bytes of a dotted address. */
export function ipv4Bytes(text: string): Uint8Array {
  const out = new Uint8Array(4);
  new DataView(out.buffer).setUint32(0, parseIPv4(text));
  return out;
}

/** The prefix length of a netmask ("255.255.255.0" → 24); throws for a non-contiguous mask. */
export function prefixLengthOf(netmask: string): number {
  const value = parseIPv4(netmask);
  const inverted = ~value >>> 0;
  if ((inverted & (inverted + 1)) !== 0) throw new InvalidAddressError(`non-contiguous netmask ${netmask}`);
  return 32 - Math.log2(inverted + 1);
}

/** The netmask of a prefix length (24 → "255.255.255.0"). */
export function netmaskOf(prefixLength: number): string {
  if (!Number.isInteger(prefixLength) || prefixLength < 0 || prefixLength > 32) {
    throw new InvalidAddressError(`invalid prefix length ${prefixLength}`);
  }
  return formatIPv4(prefixLength === 0 ? 0 : (0xffffffff << (32 - prefixLength)) >>> 0);
}

/** The pre-CIDR prefix length of an address's class, for a server that sends no subnet mask. */
export function classfulPrefixLength(address: string): number {
  const first = parseIPv4(address) >>> 24;
  if (first < 128) return 8;
  if (first < 192) return 16;
  return 24;
}

/** sizeof(struct sockaddr_in). */
export const SOCKADDR_IN_SIZE = 16;

/** A struct sockaddr_in: family in host order, port and address in network order. */
export function sockaddrIn(address: string, port = 0): Uint8Array {
  const out = new Uint8Array(SOCKADDR_IN_SIZE);
  const view = new DataView(out.buffer);
  view.setUint16(0, AF_INET, true);
  view.setUint16(2, port);
  out.set(ipv4Bytes(address), 4);
  return out;
}
