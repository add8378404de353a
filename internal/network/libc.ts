// The few libc calls this package makes through bun:ffi, and how their
// failures become errors.
//
// The node image has no iproute2 and no DHCP client, so interface setup and
// the DHCP socket talk to the kernel directly: socket(2), ioctl(2) and the
// BSD socket calls. Every wrapper here returns the raw result; `check()` turns
// a -1 into an ErrnoError that names the call and the errno, read right after
// the call through `__errno_location()` before anything else can overwrite it.
//
// Struct layouts in this package are those of 64-bit Linux (x86_64, aarch64).
// The wrappers keep the C functions' argument order, more positional
// arguments than the codebase otherwise allows, so that each can be checked
// against its man page at a glance.

import { dlopen, FFIType, ptr, read, type Pointer } from "bun:ffi";
import { ipv4Bytes } from "./ipv4.ts";

export const AF_INET = 2;
export const SOCK_DGRAM = 2;
export const SOCK_CLOEXEC = 0o2000000;
export const SOL_SOCKET = 1;
export const SO_REUSEADDR = 2;
export const SO_BROADCAST = 6;
export const SO_BINDTODEVICE = 25;
export const MSG_DONTWAIT = 0x40;

export const EINTR = 4;
export const EAGAIN = 11;
export const EEXIST = 17;
export const ESRCH = 3;
export const ENOBUFS = 105;

/** Names of the errnos this package can meet, for messages a reader can search for. */
const ERRNO_NAMES: Record<number, string> = {
  1: "EPERM",
  2: "ENOENT",
  3: "ESRCH",
  4: "EINTR",
  9: "EBADF",
  11: "EAGAIN",
  12: "ENOMEM",
  13: "EACCES",
  14: "EFAULT",
  17: "EEXIST",
  19: "ENODEV",
  22: "EINVAL",
  24: "EMFILE",
  25: "ENOTTY",
  90: "EMSGSIZE",
  95: "EOPNOTSUPP",
  97: "EAFNOSUPPORT",
  98: "EADDRINUSE",
  99: "EADDRNOTAVAIL",
  100: "ENETDOWN",
  101: "ENETUNREACH",
  105: "ENOBUFS",
  113: "EHOSTUNREACH",
};

const libc = dlopen("libc.so.6", {
  socket: { args: [FFIType.i32, FFIType.i32, FFIType.i32], returns: FFIType.i32 },
  close: { args: [FFIType.i32], returns: FFIType.i32 },
  // ioctl is variadic; on 64-bit Linux its third argument travels like a fixed one.
  ioctl: { args: [FFIType.i32, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
  setsockopt: { args: [FFIType.i32, FFIType.i32, FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  bind: { args: [FFIType.i32, FFIType.ptr, FFIType.u32], returns: FFIType.i32 },
  sendto: {
    args: [FFIType.i32, FFIType.ptr, FFIType.u64, FFIType.i32, FFIType.ptr, FFIType.u32],
    returns: FFIType.i64_fast,
  },
  recvfrom: {
    args: [FFIType.i32, FFIType.ptr, FFIType.u64, FFIType.i32, FFIType.ptr, FFIType.ptr],
    returns: FFIType.i64_fast,
  },
  __errno_location: { args: [], returns: FFIType.ptr },
  strerror: { args: [FFIType.i32], returns: FFIType.cstring },
});

/** A failed libc call: which call, and the errno it left. */
export class ErrnoError extends Error {
  override name = "ErrnoError";
  constructor(
    readonly call: string,
    readonly errno: number,
  ) {
    super(`${call}: ${errnoName(errno)} (${String(libc.symbols.strerror(errno))})`);
  }
}

/** "ENODEV", or "errno 123" for one this package does not name. */
export function errnoName(errno: number): string {
  return ERRNO_NAMES[errno] ?? `errno ${errno}`;
}

/** The calling thread's errno. Read it right after the failed call. */
function lastErrno(): number {
  const location = libc.symbols.__errno_location();
  return location === null ? 0 : read.i32(location, 0);
}

/** Returns a libc result, or throws an ErrnoError naming `call` if it is negative. */
export function check(result: number | bigint, call: string): number {
  const value = Number(result);
  if (value < 0) throw new ErrnoError(call, lastErrno());
  return value;
}

export function socket(domain: number, type: number, protocol: number): number {
  return check(libc.symbols.socket(domain, type, protocol), "socket");
}

/** Closes a descriptor. Errors are ignored: Linux frees the descriptor even when close fails. */
export function close(fd: number): void {
  libc.symbols.close(fd);
}

/** ioctl(fd, request, arg); `name` is the request's name for error messages (SIOCSIFADDR). */
export function ioctl(fd: number, request: number, arg: Uint8Array, name: string): void {
  check(libc.symbols.ioctl(fd, request, arg), `ioctl ${name}`);
}

export function setsockopt(fd: number, level: number, option: number, value: Uint8Array, name: string): void {
  check(libc.symbols.setsockopt(fd, level, option, value, value.byteLength), `setsockopt ${name}`);
}

export function bind(fd: number, address: Uint8Array): void {
  check(libc.symbols.bind(fd, address, address.byteLength), "bind");
}

/** The number of bytes sent, or -1 with `errno` for the caller to judge (EAGAIN is not fatal). */
export function sendto(fd: number, data: Uint8Array, flags: number, to: Uint8Array): { result: number; errno: number } {
  const result = Number(libc.symbols.sendto(fd, data, data.byteLength, flags, to, to.byteLength));
  return { result, errno: result < 0 ? lastErrno() : 0 };
}

/** The number of bytes received, or -1 with `errno` for the caller to judge (EAGAIN means nothing yet). */
export function recvfrom(
  fd: number,
  buffer: Uint8Array,
  flags: number,
  from: Uint8Array,
  fromLength: Uint32Array,
): { result: number; errno: number } {
  const result = Number(libc.symbols.recvfrom(fd, buffer, buffer.byteLength, flags, from, fromLength));
  return { result, errno: result < 0 ? lastErrno() : 0 };
}

/** The address of a buffer, for structs that hold pointers (rtentry.rt_dev). Keep the buffer alive. */
export function addressOf(buffer: Uint8Array): Pointer {
  return ptr(buffer);
}

/** A C string: the bytes of `text` and a terminating NUL. */
export function cString(text: string): Uint8Array {
  const bytes = new TextEncoder().encode(text);
  const out = new Uint8Array(bytes.byteLength + 1);
  out.set(bytes);
  return out;
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
