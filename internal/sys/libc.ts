// libc system calls through bun:ffi: what PID 1 needs and bun does not offer
// (mount, reboot, waitpid on orphans, kernel modules, hostname).

import { dlopen, FFIType, read, type Pointer } from "bun:ffi";

const LIBC = "libc.so.6";
const SYS_finit_module = 313; // x86_64

let lib: ReturnType<typeof open> | undefined;

function open() {
  return dlopen(LIBC, {
    mount: { args: [FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
    umount2: { args: [FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    reboot: { args: [FFIType.i32], returns: FFIType.i32 },
    sync: { args: [], returns: FFIType.void },
    sethostname: { args: [FFIType.ptr, FFIType.u64], returns: FFIType.i32 },
    waitpid: { args: [FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i32 },
    syscall: { args: [FFIType.i64, FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i64 },
    prctl: { args: [FFIType.i32, FFIType.u64, FFIType.u64, FFIType.u64, FFIType.u64], returns: FFIType.i32 },
    strerror: { args: [FFIType.i32], returns: FFIType.cstring },
    __errno_location: { args: [], returns: FFIType.ptr },
  });
}

function libc() {
  lib ??= open();
  return lib.symbols;
}

/** A failed system call: names the call, its subject and the errno. */
export class SyscallError extends Error {
  override name = "SyscallError";
  constructor(
    readonly call: string,
    readonly errno: number,
    subject: string,
  ) {
    super(`${call} ${subject}: ${String(libc().strerror(errno))} (errno ${errno})`);
  }
}

function errno(): number {
  return read.i32(libc().__errno_location() as Pointer, 0);
}

function cstr(s: string): Buffer {
  return Buffer.from(`${s}\0`);
}

function check(result: number | bigint, call: string, subject: string): void {
  if (Number(result) < 0) throw new SyscallError(call, errno(), subject);
}

export const MS_RDONLY = 1n;
export const MS_NOSUID = 2n;
export const MS_NODEV = 4n;
export const MS_NOEXEC = 8n;
export const MNT_DETACH = 2;

export function mount(source: string, target: string, fstype: string, flags = 0n, data = ""): void {
  const result = libc().mount(cstr(source), cstr(target), cstr(fstype), flags, data ? cstr(data) : null);
  check(result, "mount", `${fstype} ${source} on ${target}`);
}

export function umount(target: string, flags = 0): void {
  check(libc().umount2(cstr(target), flags), "umount", target);
}

const LINUX_REBOOT_CMD_POWER_OFF = 0x4321fedc;
const LINUX_REBOOT_CMD_RESTART = 0x01234567;

/** Flushes filesystems and powers off or restarts the machine. Only returns on failure. */
export function reboot(how: "poweroff" | "restart"): void {
  libc().sync();
  const cmd = how === "poweroff" ? LINUX_REBOOT_CMD_POWER_OFF : LINUX_REBOOT_CMD_RESTART;
  check(libc().reboot(cmd), "reboot", how);
}

const LINUX_REBOOT_CMD_CAD_OFF = 0;

/** Makes the kernel send SIGINT to PID 1 on Ctrl-Alt-Del instead of restarting at once. */
export function disableCtrlAltDel(): void {
  check(libc().reboot(LINUX_REBOOT_CMD_CAD_OFF), "reboot", "CAD_OFF");
}

export function sync(): void {
  libc().sync();
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
  const result = libc().syscall(BigInt(SYS_finit_module), fd, cstr(params), 0);
  if (Number(result) < 0) {
    const code = errno();
    const EEXIST = 17;
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
