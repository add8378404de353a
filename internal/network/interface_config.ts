// Interface configuration through the kernel's classic ioctls, as ifconfig
// and route did it, so the node needs no iproute2: link flags, an IPv4
// address and netmask, and the default route.
//
// Every function opens its own control socket and closes it, and throws an
// InterfaceError that names the interface, what it tried and the errno.

import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import * as sys from "../sys/mod.ts";
import { ANY_ADDRESS, netmaskOf, sockaddrIn } from "./ipv4.ts";

export class InterfaceError extends Error {
  override name = "InterfaceError";
}

/** Where the kernel lists network interfaces. */
export const SYS_CLASS_NET = "/sys/class/net";

// Requests from <linux/sockios.h>.
const SIOCADDRT = 0x890b;
const SIOCDELRT = 0x890c;
const SIOCGIFFLAGS = 0x8913;
const SIOCSIFFLAGS = 0x8914;
const SIOCSIFADDR = 0x8916;
const SIOCSIFNETMASK = 0x891c;
const SIOCGIFHWADDR = 0x8927;

const IFF_UP = 0x1;
const RTF_UP = 0x1;
const RTF_GATEWAY = 0x2;
/** ARPHRD_ETHER in /sys/class/net/<name>/type: the only kind of link DHCP runs on here. */
const ARPHRD_ETHER = 1;

/** IFNAMSIZ: interface names are at most 15 bytes and a NUL. */
const IFNAMSIZ = 16;
/** sizeof(struct ifreq): the name, then a 24-byte union (sockaddr, flags, ...). */
const IFREQ_SIZE = 40;
const IFREQ_UNION_OFFSET = 16;
const ETHER_ADDRESS_LENGTH = 6;

// struct rtentry on 64-bit Linux (checked against <net/route.h> with offsetof).
const RTENTRY_SIZE = 120;
const RTENTRY_DST_OFFSET = 8;
const RTENTRY_GATEWAY_OFFSET = 24;
const RTENTRY_GENMASK_OFFSET = 40;
const RTENTRY_FLAGS_OFFSET = 56;
const RTENTRY_DEV_OFFSET = 88;

export const LOOPBACK_INTERFACE = "lo";
export const LOOPBACK_ADDRESS = "127.0.0.1";
export const LOOPBACK_PREFIX_LENGTH = 8;

/**
 * The interface to run DHCP on: the first Ethernet interface by name, which
 * skips `lo` and tunnel devices the kernel creates on its own (sit0, tunl0).
 * Undefined if there is none (yet: a driver may still be probing).
 */
export function findInterface(options: { sysClassNet?: string } = {}): string | undefined {
  const root = options.sysClassNet ?? SYS_CLASS_NET;
  let names: string[];
  try {
    names = readdirSync(root).sort();
  } catch (err) {
    throw new InterfaceError(`could not list network interfaces in ${root}: ${(err as Error).message}`, { cause: err });
  }
  return names.find((name) => {
    try {
      return Number(readFileSync(join(root, name, "type"), "utf8").trim()) === ARPHRD_ETHER;
    } catch {
      return false; // The interface went away while we looked.
    }
  });
}

/** Sets IFF_UP on the interface (keeping its other flags). */
export function setLinkUp(name: string): void {
  withControlSocket(name, "bring up", (fd) => {
    const request = ifreq(name);
    sys.ioctl(fd, SIOCGIFFLAGS, request, "SIOCGIFFLAGS");
    const view = new DataView(request.buffer);
    const flags = view.getUint16(IFREQ_UNION_OFFSET, true);
    if (flags & IFF_UP) return;
    view.setUint16(IFREQ_UNION_OFFSET, flags | IFF_UP, true);
    sys.ioctl(fd, SIOCSIFFLAGS, request, "SIOCSIFFLAGS");
  });
}

/** The interface's MAC address. */
export function hardwareAddress(name: string): Uint8Array {
  return withControlSocket(name, "read the hardware address of", (fd) => {
    const request = ifreq(name);
    sys.ioctl(fd, SIOCGIFHWADDR, request, "SIOCGIFHWADDR");
    // ifr_hwaddr is a sockaddr: 2 bytes of family (ARPHRD_*), then the address.
    return request.slice(IFREQ_UNION_OFFSET + 2, IFREQ_UNION_OFFSET + 2 + ETHER_ADDRESS_LENGTH);
  });
}

/**
 * Makes `address`/`prefixLength` the interface's IPv4 address, replacing the
 * one it had. Setting the address and mask it already has changes nothing.
 * Replacing an address can drop routes through it: add routes afterwards.
 */
export function setAddress(name: string, address: string, prefixLength: number): void {
  withControlSocket(name, `set address ${address}/${prefixLength} on`, (fd) => {
    sys.ioctl(fd, SIOCSIFADDR, ifreq(name, address), "SIOCSIFADDR");
    sys.ioctl(fd, SIOCSIFNETMASK, ifreq(name, netmaskOf(prefixLength)), "SIOCSIFNETMASK");
  });
}

/** Removes the interface's IPv4 address (the kernel drops its routes with it). */
export function clearAddress(name: string): void {
  withControlSocket(name, "remove the address of", (fd) => {
    // Setting 0.0.0.0 deletes the address, as `ifconfig eth0 0.0.0.0` does.
    sys.ioctl(fd, SIOCSIFADDR, ifreq(name, ANY_ADDRESS), "SIOCSIFADDR");
  });
}

/** Adds a default route through `gateway` on the interface; one that exists already is fine. */
export function addDefaultRoute(name: string, gateway: string): void {
  withControlSocket(name, `add a default route via ${gateway} on`, (fd) => {
    const { entry, dev } = defaultRoute(name, gateway);
    try {
      sys.ioctl(fd, SIOCADDRT, entry, "SIOCADDRT");
    } catch (err) {
      if (!(err instanceof sys.SyscallError && err.errno === sys.EEXIST)) throw err;
    }
    dev.fill(0); // Keeps the buffer that rt_dev points to alive until here.
  });
}

/** Removes the default route through `gateway` on the interface; one that is gone already is fine. */
export function deleteDefaultRoute(name: string, gateway: string): void {
  withControlSocket(name, `delete the default route via ${gateway} on`, (fd) => {
    const { entry, dev } = defaultRoute(name, gateway);
    try {
      sys.ioctl(fd, SIOCDELRT, entry, "SIOCDELRT");
    } catch (err) {
      if (!(err instanceof sys.SyscallError && err.errno === sys.ESRCH)) throw err;
    }
    dev.fill(0);
  });
}

/** Brings up `lo` with 127.0.0.1/8, which a fresh network namespace (or a booting node) lacks. */
export function configureLoopback(): void {
  setLinkUp(LOOPBACK_INTERFACE);
  // The kernel adds 127.0.0.1/8 itself when lo comes up; setting it again is a no-op that states the intent.
  setAddress(LOOPBACK_INTERFACE, LOOPBACK_ADDRESS, LOOPBACK_PREFIX_LENGTH);
}

/** Runs `body` with an AF_INET control socket, turning failures into InterfaceErrors about `name`. */
function withControlSocket<T>(name: string, action: string, body: (fd: number) => T): T {
  let fd: number | undefined;
  try {
    fd = sys.socket(sys.AF_INET, sys.SOCK_DGRAM | sys.SOCK_CLOEXEC, 0);
    return body(fd);
  } catch (err) {
    if (err instanceof InterfaceError) throw err;
    throw new InterfaceError(`could not ${action} ${name}: ${(err as Error).message}`, { cause: err });
  } finally {
    if (fd !== undefined) sys.close(fd);
  }
}

/** A struct ifreq for `name`, with an AF_INET sockaddr holding `address` if given. */
function ifreq(name: string, address?: string): Uint8Array {
  const out = new Uint8Array(IFREQ_SIZE);
  const nameBytes = sys.cString(name);
  if (nameBytes.byteLength > IFNAMSIZ) throw new InterfaceError(`interface name ${name} is longer than ${IFNAMSIZ - 1} bytes`);
  out.set(nameBytes);
  if (address !== undefined) out.set(sockaddrIn(address), IFREQ_UNION_OFFSET);
  return out;
}

/** A struct rtentry for 0.0.0.0/0 via `gateway` on `name`, and the C string its rt_dev points to. */
function defaultRoute(name: string, gateway: string): { entry: Uint8Array; dev: Uint8Array } {
  const entry = new Uint8Array(RTENTRY_SIZE);
  const view = new DataView(entry.buffer);
  const dev = sys.cString(name);
  entry.set(sockaddrIn(ANY_ADDRESS), RTENTRY_DST_OFFSET);
  entry.set(sockaddrIn(gateway), RTENTRY_GATEWAY_OFFSET);
  entry.set(sockaddrIn(ANY_ADDRESS), RTENTRY_GENMASK_OFFSET);
  view.setUint16(RTENTRY_FLAGS_OFFSET, RTF_UP | RTF_GATEWAY, true);
  view.setBigUint64(RTENTRY_DEV_OFFSET, BigInt(sys.addressOf(dev)), true);
  return { entry, dev };
}
