// Package sys: the Linux system interface PID 1 needs, through bun:ffi.
//
//   cmd/init ──▶ mount / umount      (pseudo filesystems, ESP, data)
//            ──▶ loadModules         (the image's load list, in order → finit_module)
//            ──▶ reapOrphans         (zombies that are not bun's own children)
//            ──▶ reboot / sync       (clean power-off and restart)
//            ──▶ sethostname
//
// Invariants: every failed call throws a SyscallError naming the call, its
// subject and errno's text; nothing here retries or logs — callers decide.
// libc is opened lazily, so importing this package costs nothing off-node.

export {
  mount,
  umount,
  reboot,
  disableCtrlAltDel,
  sync,
  sethostname,
  reap,
  finitModule,
  becomeSubreaper,
  SyscallError,
  MS_RDONLY,
  MS_NOSUID,
  MS_NODEV,
  MS_NOEXEC,
  MNT_DETACH,
} from "./libc.ts";
export { loadModules, parseLoadList, ModuleError } from "./kmod.ts";
export { reapOrphans, processState } from "./reaper.ts";
