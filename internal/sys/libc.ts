// The node's one binding of libc through bun:ffi: the system calls bun does
// not offer. PID 1 needs mount, reboot, waitpid on orphans, kernel modules
// and the hostname; internal/network needs socket(2), ioctl(2) and the BSD
// socket calls, because the node image has no iproute2 and no DHCP client.
//
// libc is opened on the first call, not on import, so importing this file
// costs nothing off-node (tests, ctl). A failed call throws a SyscallError
// that names the call, its subject and the errno, read right after the call
// through `__errno_location()` before anything else can overwrite it; the
// socket send and receive calls instead return the errno for the caller to
// judge (EAGAIN is not a failure there).
//
// Struct layouts are those of 64-bit Linux (x86_64, aarch64); the
// finit_module syscall number is x86_64's. The socket wrappers keep the C functions' argument order,
// more positional arguments than the codebase otherwise allows, so that
// each can be checked against its man page at a glance.

import { dlopen, FFIType, ptr, read, type Pointer } from "bun:ffi";

const LIBC = "libc.so.6";
const SYS_finit_module = 313; // x86_64

let lib: ReturnType<typeof open> | undefined;
let kexecLib: ReturnType<typeof openKexec> | undefined;
let quotaLib: ReturnType<typeof openQuota> | undefined;

/** syscall(2) bound with quotactl_fd's arguments: (number, fd, cmd, id, addr). */
function openQuota() {
  return dlopen(LIBC, {
    syscall: { args: [FFIType.i64, FFIType.i32, FFIType.u32, FFIType.i32, FFIType.ptr], returns: FFIType.i64 },
  });
}

/** syscall(2) bound a second time with kexec_file_load's six arguments: a binding has one signature. */
function openKexec() {
  return dlopen(LIBC, {
    syscall: { args: [FFIType.i64, FFIType.i32, FFIType.i32, FFIType.u64, FFIType.ptr, FFIType.u64], returns: FFIType.i64 },
  });
}

function open() {
  return dlopen(LIBC, {
    mount: { args: [FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
    umount2: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    reboot: { args: [FFIType.i32], returns: FFIType.i32 },
    sync: { args: [], returns: FFIType.void },
    syncfs: { args: [FFIType.i32], returns: FFIType.i32 },
    sethostname: { args: [FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
    waitpid: { args: [FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    syscall: { args: [FFIType.i64, FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i64 },
    prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
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
    setrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
    clock_settime: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
    getrlimit: { args: [FFIType.i32, FFIType.ptr], returns: FFIType.i32 },
    strerror: { args: [FFIType.i32], returns: FFIType.cstring },
    __errno_location: { args: [], returns: FFIType.ptr },
  });
}

function libc() {
  lib ??= open();
  return lib.symbols;
}

export const ESRCH = 3;
export const EINTR = 4;
export const EAGAIN = 11;
export const EEXIST = 17;
export const ENOBUFS = 105;

/** Names of the errnos the node can meet, for messages a reader can search for. */
const ERRNO_NAMES: Record<number, string> = {
  1: "EPERM",
  2: "ENOENT",
  3: "ESRCH",
  4: "EINTR",
  8: "ENOEXEC",
  9: "EBADF",
  11: "EAGAIN",
  12: "ENOMEM",
  13: "EACCES",
  14: "EFAULT",
  16: "EBUSY",
  17: "EEXIST",
  19: "ENODEV",
  20: "ENOTDIR",
  22: "EINVAL",
  24: "EMFILE",
  25: "ENOTTY",
  28: "ENOSPC",
  30: "EROFS",
  38: "ENOSYS",
  90: "EMSGSIZE",
  95: "EOPNOTSUPP",
  97: "EAFNOSUPPORT",
  98: "EADDRINUSE",
  99: "EADDRNOTAVAIL",
  100: "ENETDOWN",
  101: "ENETUNREACH",
  105: "ENOBUFS",
  113: "EHOSTUNREACH",
  122: "EDQUOT",
};

/** "ENODEV", or "errno 123" for one this file does not name. */
function errnoName(errno: number): string {
  return ERRNO_NAMES[errno] ?? `errno ${errno}`;
}

/**
 * A failed system call: names the call, its subject (a path, an ioctl
 * request; may be empty) and the errno, as
 * "ioctl SIOCGIFFLAGS: ENODEV (No such device)".
 */
export class SyscallError extends Error {
  override name = "SyscallError";
  constructor(
    readonly call: string,
    readonly errno: number,
    subject = "",
  ) {
    super(`${call}${subject ? ` ${subject}` : ""}: ${errnoName(errno)} (${String(libc().strerror(errno))})`);
  }
}

/** The calling thread's errno. Read it right after the failed call. */
function lastErrno(): number {
  const location = libc().__errno_location();
  return location === null ? 0 : read.i32(location as Pointer, 0);
}

/** Returns a libc result, or throws a SyscallError if it is negative. */
function check(result: number | bigint, call: string, subject = ""): number {
  const value = Number(result);
  if (value < 0) throw new SyscallError(call, lastErrno(), subject);
  return value;
}

const RLIMIT_NOFILE = 7;

/** This process's limit on open files: its soft and hard values. */
export function fileLimit(): { soft: number; hard: number } {
  const limit = new BigUint64Array(2);
  check(libc().getrlimit(RLIMIT_NOFILE, ptr(limit)), "getrlimit", "RLIMIT_NOFILE");
  return { soft: Number(limit[0]), hard: Number(limit[1]) };
}

/** Sets this process's limit on open files, soft and hard (raising the hard limit takes CAP_SYS_RESOURCE). Children inherit it. */
export function setFileLimit(files: number): void {
  const limit = BigUint64Array.of(BigInt(files), BigInt(files));
  check(libc().setrlimit(RLIMIT_NOFILE, ptr(limit)), "setrlimit", "RLIMIT_NOFILE");
}

const CLOCK_REALTIME = 0;

/** Sets the wall clock to `ms` since the epoch (clock_settime(CLOCK_REALTIME); takes CAP_SYS_TIME). */
export function setWallClock(ms: number): void {
  const seconds = Math.floor(ms / 1000);
  const timespec = BigInt64Array.of(BigInt(seconds), BigInt(Math.min(999_999_999, Math.round((ms - seconds * 1000) * 1e6))));
  check(libc().clock_settime(CLOCK_REALTIME, ptr(timespec)), "clock_settime", "CLOCK_REALTIME");
}

/** A C string: the bytes of `text` and a terminating NUL. */
export function cString(text: string): Uint8Array {
  const bytes = new TextEncoder().encode(text);
  const out = new Uint8Array(bytes.byteLength + 1);
  out.set(bytes);
  return out;
}

/** The address of a buffer, for structs that hold pointers (rtentry.rt_dev). Keep the buffer alive. */
export function addressOf(buffer: Uint8Array): Pointer {
  return ptr(buffer);
}

// Mounts, power, hostname, processes, modules: what PID 1 calls.

export const MS_RDONLY = 1n;
export const MS_NOSUID = 2n;
export const MS_NODEV = 4n;
export const MS_NOEXEC = 8n;
/** Directory changes (create, rename, unlink) are written before the call returns. */
export const MS_DIRSYNC = 128n;
export const MS_REMOUNT = 32n;
export const MS_BIND = 4096n;
export const MNT_DETACH = 2;

export function mount(source: string, target: string, fstype: string, flags = 0n, data = ""): void {
  const result = libc().mount(cString(source), cString(target), cString(fstype), flags, data ? cString(data) : null);
  check(result, "mount", `${fstype} ${source} on ${target}`);
}

export function umount(target: string, flags = 0): void {
  check(libc().umount2(cString(target), flags), "umount", target);
}

const LINUX_REBOOT_CMD_POWER_OFF = 0x4321fedc;
const LINUX_REBOOT_CMD_RESTART = 0x01234567;
const LINUX_REBOOT_CMD_KEXEC = 0x45584543;
const REBOOT_COMMANDS = { poweroff: LINUX_REBOOT_CMD_POWER_OFF, restart: LINUX_REBOOT_CMD_RESTART, kexec: LINUX_REBOOT_CMD_KEXEC } as const;

/**
 * Flushes filesystems and powers off, restarts the machine, or starts the
 * kernel loaded by kexecFileLoad. Only returns on failure.
 */
export function reboot(how: keyof typeof REBOOT_COMMANDS): void {
  libc().sync();
  check(libc().reboot(REBOOT_COMMANDS[how]), "reboot", how);
}

const SYS_kexec_file_load = 320; // x86_64

/**
 * Loads a kernel (a bzImage), its initramfs and its command line for the
 * next reboot("kexec") (kexec_file_load(2)): the kernel checks the image and
 * keeps a digest that its purgatory checks again before it jumps.
 */
export function kexecFileLoad(kernelFd: number, initramfsFd: number, cmdline: string): void {
  kexecLib ??= openKexec();
  const text = cString(cmdline);
  const result = kexecLib.symbols.syscall(BigInt(SYS_kexec_file_load), kernelFd, initramfsFd, BigInt(text.byteLength), text, 0n);
  check(result, "kexec_file_load", `command line of ${text.byteLength} bytes`);
}

const SYS_quotactl_fd = 443; // the same on x86_64 and aarch64

/**
 * quotactl_fd(2): a quota command on the file system that holds the open
 * file `fd` (any file or directory on it; no device path needed). `what`
 * names the subject for errors.
 */
export function quotactlFd(fd: number, cmd: number, id: number, addr: Uint8Array, what: string): void {
  quotaLib ??= openQuota();
  check(quotaLib.symbols.syscall(BigInt(SYS_quotactl_fd), fd, cmd, id, addr), "quotactl_fd", what);
}

const LINUX_REBOOT_CMD_CAD_OFF = 0;

/** Makes the kernel send SIGINT to PID 1 on Ctrl-Alt-Del instead of restarting at once. */
export function disableCtrlAltDel(): void {
  check(libc().reboot(LINUX_REBOOT_CMD_CAD_OFF), "reboot", "CAD_OFF");
}

export function sync(): void {
  libc().sync();
}

/** Flushes the one file system that open file descriptor `fd` is on (syncfs(2)), not every mounted one. */
export function syncfs(fd: number, what: string): void {
  check(libc().syncfs(fd), "syncfs", what);
}

export function sethostname(name: string): void {
  const bytes = Buffer.from(name);
  check(libc().sethostname(bytes, BigInt(bytes.length)), "sethostname", name);
}

const WNOHANG = 1;

/** Reaps `pid` if it has exited; returns whether it did. Never blocks. */
export function reap(pid: number): boolean {
  const status = new Int32Array(1);
  const result = libc().waitpid(pid, status, WNOHANG);
  return result === pid;
}

/** Loads a kernel module from an open file descriptor (finit_module(2)). */
export function finitModule(fd: number, params = ""): void {
  const result = libc().syscall(BigInt(SYS_finit_module), fd, cString(params), 0);
  if (Number(result) < 0) {
    const code = lastErrno();
    if (code === EEXIST) return; // already loaded (or built in)
    throw new SyscallError("finit_module", code, `fd ${fd}`);
  }
}

const PR_SET_CHILD_SUBREAPER = 36;

/**
 * Makes this process adopt its orphaned descendants, as PID 1 does. A node
 * core running as a plain process (tests, development) calls this so that it
 * reaps like PID 1.
 */
export function becomeSubreaper(): void {
  check(libc().prctl(PR_SET_CHILD_SUBREAPER, 1n, 0n, 0n, 0n), "prctl", "PR_SET_CHILD_SUBREAPER");
}

// Sockets and ioctls: what internal/network calls to configure interfaces
// and to run its DHCP client.

export const AF_INET = 2;
export const SOCK_DGRAM = 2;
export const SOCK_CLOEXEC = 0o2000000;
export const SOL_SOCKET = 1;
export const SO_REUSEADDR = 2;
export const SO_BROADCAST = 6;
export const SO_BINDTODEVICE = 25;
export const MSG_DONTWAIT = 0x40;

export function socket(domain: number, type: number, protocol: number): number {
  return check(libc().socket(domain, type, protocol), "socket");
}

/** Closes a descriptor. Errors are ignored: Linux frees the descriptor even when close fails. */
export function close(fd: number): void {
  libc().close(fd);
}

/** ioctl(fd, request, arg); `name` is the request's name for error messages (SIOCSIFADDR). */
export function ioctl(fd: number, request: number, arg: Uint8Array, name: string): void {
  check(libc().ioctl(fd, request, arg), "ioctl", name);
}

export function setsockopt(fd: number, level: number, option: number, value: Uint8Array, name: string): void {
  check(libc().setsockopt(fd, level, option, value, value.byteLength), "setsockopt", name);
}

export function bind(fd: number, address: Uint8Array): void {
  check(libc().bind(fd, address, address.byteLength), "bind");
}

/** The number of bytes sent, or -1 with `errno` for the caller to judge (EAGAIN is not fatal). */
export function sendto(fd: number, data: Uint8Array, flags: number, to: Uint8Array): { result: number; errno: number } {
  const result = Number(libc().sendto(fd, data, data.byteLength, flags, to, to.byteLength));
  return { result, errno: result < 0 ? lastErrno() : 0 };
}

/** The number of bytes received, or -1 with `errno` for the caller to judge (EAGAIN means nothing yet). */
export function recvfrom(fd: number, buffer: Uint8Array, flags: number, from: Uint8Array, fromLength: Uint32Array): { result: number; errno: number } {
  const result = Number(libc().recvfrom(fd, buffer, buffer.byteLength, flags, from, fromLength));
  return { result, errno: result < 0 ? lastErrno() : 0 };
}
