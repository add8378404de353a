// Stand-in node init for the image boot smoke test (smoke.ts compiles it with
// `bun build --compile` and boots it as /init.bin). As PID 1 it exercises
// what the real init will rely on, printing one "smoke:" line per step:
// module loading from modules.load, sysfs and fw_cfg, the partitions by
// GPT name, the ESP (vfat), LUKS2 + ext4 on the data partition, etcd. Then it
// powers the VM off — on success or failure, since PID 1 must not exit.
// Off PID 1 it answers only `--version` (the image build asks every init
// for its build name) and otherwise refuses: on a host it would format a
// disk and power the host off.

import { dlopen, FFIType, ptr, read } from "bun:ffi";
import { existsSync, mkdirSync, openSync, closeSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { release } from "node:os";

const SYS_FINIT_MODULE = 313;
const EEXIST = 17;
const LINUX_REBOOT_CMD_POWER_OFF = 0x4321fedc;
const DEVICE_WAIT_MS = 10_000;
const DEVICE_POLL_MS = 50;
const FW_CFG_ITEM = "/sys/firmware/qemu_fw_cfg/by_name/opt/test/raw";
const LUKS_NAME = "data";
const LUKS_KEY_FILE = "/run/smoke.key";

if (process.argv[2] === "--version") {
  process.stdout.write("smoke-stand-in\n");
  process.exit(0);
}
if (process.pid !== 1) {
  process.stderr.write("smoke_init: not PID 1, doing nothing (this is a VM's stand-in init)\n");
  process.exit(2);
}

const started = performance.now();
const uptime = (): string => readFileSync("/proc/uptime", "utf8").split(" ")[0] ?? "?";
const say = (message: string): void => {
  process.stdout.write(`smoke: ${message} (+${Math.round(performance.now() - started)} ms, uptime ${uptime()} s)\n`);
};
say(`hello from pid ${process.pid}, argv ${JSON.stringify(process.argv.slice(2))}`);

const libc = dlopen("libc.so.6", {
  syscall: { args: [FFIType.i64, FFIType.i32, FFIType.ptr, FFIType.i32], returns: FFIType.i64 },
  mount: { args: [FFIType.ptr, FFIType.ptr, FFIType.ptr, FFIType.u64, FFIType.ptr], returns: FFIType.i32 },
  umount: { args: [FFIType.ptr], returns: FFIType.i32 },
  sync: { args: [], returns: FFIType.void },
  reboot: { args: [FFIType.i32], returns: FFIType.i32 },
  __errno_location: { args: [], returns: FFIType.ptr },
}).symbols;

class SmokeError extends Error {
  override name = "SmokeError";
}

const cString = (text: string): Uint8Array => new TextEncoder().encode(text + "\0");
const errno = (): number => {
  const location = libc.__errno_location();
  return location === null ? -1 : read.i32(location, 0);
};

function mount(source: string, target: string, type: string): void {
  mkdirSync(target, { recursive: true });
  if (libc.mount(ptr(cString(source)), ptr(cString(target)), ptr(cString(type)), 0, null) !== 0) {
    throw new SmokeError(`could not mount ${type} ${source} on ${target}: errno ${errno()}`);
  }
}

function umount(target: string): void {
  if (libc.umount(ptr(cString(target))) !== 0) throw new SmokeError(`could not unmount ${target}: errno ${errno()}`);
}

function loadModules(): number {
  const dir = `/lib/modules/${release()}`;
  // Each line's first word is the path; a CPU-specific module (cpu=…) is left
  // to the node itself, which checks the CPU's flags first.
  const list = readFileSync(`${dir}/modules.load`, "utf8")
    .split("\n")
    .filter((line) => line.trim() !== "" && !/\scpu=/.test(line))
    .map((line) => line.trim());
  const noParams = cString("");
  for (const module of list) {
    const fd = openSync(`${dir}/${module}`, "r");
    try {
      if (libc.syscall(SYS_FINIT_MODULE, fd, ptr(noParams), 0) !== 0n && errno() !== EEXIST) {
        throw new SmokeError(`could not load ${module}: errno ${errno()}`);
      }
    } finally {
      closeSync(fd);
    }
  }
  return list.length;
}

async function waitFor(path: string): Promise<void> {
  const deadline = performance.now() + DEVICE_WAIT_MS;
  while (!existsSync(path)) {
    if (performance.now() > deadline) throw new SmokeError(`${path} did not appear`);
    await Bun.sleep(DEVICE_POLL_MS);
  }
}

/** The block device whose GPT partition name is name, from sysfs uevent files. */
function partitionByName(name: string): string {
  for (const device of readdirSync("/sys/class/block")) {
    const uevent = readFileSync(`/sys/class/block/${device}/uevent`, "utf8");
    if (uevent.split("\n").includes(`PARTNAME=${name}`)) return `/dev/${device}`;
  }
  throw new SmokeError(`no partition named ${name}`);
}

/** Runs argv to completion and returns its stdout; its stderr is shown, as it may hold warnings. */
function exec(argv: string[]): string {
  const result = Bun.spawnSync(argv, { stdout: "pipe", stderr: "pipe" });
  const stdout = result.stdout.toString().trim();
  const stderr = result.stderr.toString().trim();
  if (result.exitCode !== 0) throw new SmokeError(`${argv.join(" ")} exited with ${result.exitCode}: ${stdout} ${stderr}`);
  if (stderr !== "") say(`${argv[0]} said: ${stderr.replaceAll("\n", " | ")}`);
  return stdout;
}

async function main(): Promise<void> {
  say(`loaded ${loadModules()} modules`);
  mount("sysfs", "/sys", "sysfs");
  say(`fw_cfg opt/test = ${JSON.stringify(readFileSync(FW_CFG_ITEM, "utf8"))}`);

  const esp = partitionByName("ESP");
  const data = partitionByName("DATA");
  await waitFor(esp);
  await waitFor(data);
  say(`partitions: ESP=${esp} DATA=${data}`);

  mount(esp, "/mnt/esp", "vfat");
  writeFileSync("/mnt/esp/hello.txt", "hello");
  say(`esp mounted, holds ${JSON.stringify(readdirSync("/mnt/esp"))}`);
  umount("/mnt/esp");

  writeFileSync(LUKS_KEY_FILE, "smoke-test-key");
  // PBKDF2 at its minimum: Argon2's calibration would take minutes under TCG.
  exec(["/usr/sbin/cryptsetup", "luksFormat", "--batch-mode", "--type", "luks2", "--pbkdf", "pbkdf2", "--pbkdf-force-iterations", "1000", "--key-file", LUKS_KEY_FILE, data]);
  exec(["/usr/sbin/cryptsetup", "open", "--key-file", LUKS_KEY_FILE, data, LUKS_NAME]);
  say(`luks2 opened: ${exec(["/usr/sbin/cryptsetup", "status", LUKS_NAME]).split("\n")[0]}`);
  exec(["/usr/sbin/mke2fs", "-q", "-t", "ext4", `/dev/mapper/${LUKS_NAME}`]);
  mount(`/dev/mapper/${LUKS_NAME}`, "/mnt/data", "ext4");
  writeFileSync("/mnt/data/hello.txt", "hello");
  say(`ext4 on luks mounted, holds ${JSON.stringify(readdirSync("/mnt/data"))}`);
  umount("/mnt/data");
  say(
    `e2fsck: ${exec(["/usr/sbin/e2fsck", "-f", "-n", `/dev/mapper/${LUKS_NAME}`])
      .split("\n")
      .at(-1)}`,
  );
  exec(["/usr/sbin/cryptsetup", "close", LUKS_NAME]);

  say(`etcd: ${exec(["/usr/bin/etcd", "--version"]).split("\n")[0]}`);
  say("ok");
}

try {
  await main();
} catch (error) {
  say(`FAIL ${error instanceof Error ? error.message : String(error)}`);
}
libc.sync();
libc.reboot(LINUX_REBOOT_CMD_POWER_OFF);
