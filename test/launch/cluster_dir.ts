// The cluster directory (default out/cluster/<name>/): everything a launched
// cluster keeps on the host, by name, so that a person can look at it.
//
//   out/cluster/<name>/
//   ├── .nodecore-cluster        marker: this directory belongs to the launcher
//   ├── launcher.pid             the launcher using it (one at a time)
//   ├── owner/                   out/ctl's config directory (ctl --config): the owner's
//   │   ├── owner.key            Ed25519 private key, and once ownership is taken
//   │   └── owner.crt, ca.crt, endpoints
//   ├── ctl                      out/ctl inside the cluster's namespace, as its owner
//   ├── register.pb              register parameters for nodes 2..N
//   ├── dnsmasq.leases, dnsmasq.log
//   ├── chrony.conf, chrony.log, chrony.pid   the network's time server
//   └── <node>.disk.img, <node>.parameters.pb, <node>.storage-test-key,
//       <node>.console.log, <node>.qmp.sock

import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const MARKER = ".nodecore-cluster";
const LOCK = "launcher.pid";
/** out/ctl's config directory; the owner key sits where ctl looks by default (<config>/owner.key). */
const OWNER_DIR = "owner";
/** Where launchers before owner/ kept the ctl config and, beside it, the owner key. */
const OLD_CTL_CONFIG = "ctl";
const OLD_OWNER_KEY = "owner.key.pem";
/** sun_path holds 108 bytes with the terminating NUL. */
const MAX_UNIX_SOCKET_PATH = 107;

export interface NodeFiles {
  disk: string;
  parameters: string;
  storageTestKey: string;
  consoleLog: string;
  qmpSocket: string;
}

export class ClusterDirError extends Error {
  override name = "ClusterDirError";
}

function processExists(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}

/**
 * Creates owner/ (private: it holds the owner key). A directory kept (--keep)
 * from a launcher before owner/ existed has its config in ctl/, which must make
 * way for the wrapper script, and its key beside it: its disks were
 * bootstrapped with that key, so both move in.
 */
function prepareOwnerDir(dir: string): void {
  const oldConfig = join(dir, OLD_CTL_CONFIG);
  if (existsSync(oldConfig) && statSync(oldConfig).isDirectory() && !existsSync(join(dir, OWNER_DIR))) renameSync(oldConfig, join(dir, OWNER_DIR));
  mkdirSync(join(dir, OWNER_DIR), { recursive: true, mode: 0o700 });
  const oldKey = join(dir, OLD_OWNER_KEY);
  if (existsSync(oldKey) && !existsSync(join(dir, OWNER_DIR, "owner.key"))) renameSync(oldKey, join(dir, OWNER_DIR, "owner.key"));
}

export class ClusterDir {
  private constructor(readonly path: string) {}

  /**
   * Takes the directory for this process. With fresh, empties it first — but
   * only if it is empty or carries the launcher's marker, so a mistyped path
   * never deletes someone's files. Refuses a directory another live launcher holds.
   */
  static open(path: string, options: { fresh: boolean }): ClusterDir {
    const dir = resolve(path);
    const lock = join(dir, LOCK);
    if (existsSync(lock)) {
      const holder = Number(readFileSync(lock, "utf8").trim());
      if (holder !== process.pid && Number.isInteger(holder) && holder > 0 && processExists(holder)) {
        throw new ClusterDirError(`cluster directory ${dir} is in use by launcher pid ${holder}`);
      }
    }
    if (options.fresh && existsSync(dir) && readdirSync(dir).length > 0) {
      if (!existsSync(join(dir, MARKER))) throw new ClusterDirError(`refusing to empty ${dir}: it is not a launcher cluster directory (no ${MARKER})`);
      for (const entry of readdirSync(dir)) rmSync(join(dir, entry), { recursive: true, force: true });
    }
    mkdirSync(dir, { recursive: true });
    prepareOwnerDir(dir);
    writeFileSync(join(dir, MARKER), "created by test/launch; the launcher empties it at the next fresh launch\n");
    writeFileSync(lock, `${process.pid}\n`);
    return new ClusterDir(dir);
  }

  /** The directory handed to out/ctl as --config. */
  get ctlConfig(): string {
    return join(this.path, OWNER_DIR);
  }
  get ownerKey(): string {
    return join(this.ctlConfig, "owner.key");
  }
  /** The script that runs out/ctl in the cluster (ctl_wrapper.ts). */
  get ctlWrapper(): string {
    return join(this.path, "ctl");
  }
  /** The script that runs the built kubectl in the cluster as the owner (ctl_wrapper.ts). */
  get kubectlWrapper(): string {
    return join(this.path, "kubectl");
  }
  /** The owner's kubeconfig (ctl kubeconfig). */
  get kubeconfig(): string {
    return join(this.path, "kubeconfig");
  }
  get dhcpLeases(): string {
    return join(this.path, "dnsmasq.leases");
  }
  get dhcpLog(): string {
    return join(this.path, "dnsmasq.log");
  }
  get timeServerFiles(): { confFile: string; logFile: string; pidFile: string } {
    return { confFile: join(this.path, "chrony.conf"), logFile: join(this.path, "chrony.log"), pidFile: join(this.path, "chrony.pid") };
  }

  node(name: string): NodeFiles {
    let qmpSocket = join(this.path, `${name}.qmp.sock`);
    if (qmpSocket.length > MAX_UNIX_SOCKET_PATH) qmpSocket = join(tmpdir(), `nodecore-${process.pid}-${name}.qmp.sock`);
    return {
      disk: join(this.path, `${name}.disk.img`),
      parameters: join(this.path, `${name}.parameters.pb`),
      storageTestKey: join(this.path, `${name}.storage-test-key`),
      consoleLog: join(this.path, `${name}.console.log`),
      qmpSocket,
    };
  }

  /** Gives the directory up (the files stay for inspection). */
  release(): void {
    const lock = join(this.path, LOCK);
    try {
      if (readFileSync(lock, "utf8").trim() === String(process.pid)) rmSync(lock, { force: true });
    } catch {
      // Already gone.
    }
  }
}
