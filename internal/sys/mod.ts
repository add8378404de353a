// Package sys: the Linux system interface the node needs, through one
// bun:ffi binding of libc (libc.ts).
//
//   cmd/init ──▶ mount / umount      (pseudo filesystems, ESP, data)
//            ──▶ loadModules         (the image's load list, in order → finit_module)
//            ──▶ reapOrphans         (zombies that are not bun's own children)
//            ──▶ reboot / sync       (clean power-off and restart, kexec)
//            ──▶ kexecFileLoad       (load the chosen slot's kernel, internal/update)
//   localstorage ─▶ syncfs          (the ESP alone, around its scrub)
//            ──▶ sethostname
//   network  ──▶ socket / ioctl      (interface flags, address, default route)
//            ──▶ setsockopt / bind / sendto / recvfrom  (the DHCP socket)
//
// Invariants: every failed call throws a SyscallError naming the call, its
// subject and the errno (name and text), except sendto and recvfrom, which
// return the errno for the caller to judge; nothing here retries or logs —
// callers decide. libc is opened lazily, so importing this package costs
// nothing off-node.

export {
  mount,
  umount,
  reboot,
  disableCtrlAltDel,
  sync,
  syncfs,
  sethostname,
  reap,
  finitModule,
  kexecFileLoad,
  becomeSubreaper,
  SyscallError,
  MS_RDONLY,
  MS_NOSUID,
  MS_NODEV,
  MS_NOEXEC,
  MS_DIRSYNC,
  MS_REMOUNT,
  MS_BIND,
  MNT_DETACH,
  socket,
  close,
  ioctl,
  quotactlFd,
  fileLimit,
  setFileLimit,
  setWallClock,
  setsockopt,
  bind,
  sendto,
  recvfrom,
  cString,
  addressOf,
  AF_INET,
  SOCK_DGRAM,
  SOCK_CLOEXEC,
  SOL_SOCKET,
  SO_REUSEADDR,
  SO_BROADCAST,
  SO_BINDTODEVICE,
  MSG_DONTWAIT,
  ESRCH,
  EINTR,
  EAGAIN,
  EEXIST,
  ENOBUFS,
} from "./libc.ts";
export { cpuFlags, loadModules, parseLoadList, ModuleError, type LoadListEntry, type ModulesLoaded } from "./kmod.ts";
export { reapOrphans, processState } from "./reaper.ts";
