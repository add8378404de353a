// The cluster directory (default out/cluster/<name>/): everything a launched
// cluster keeps on the host, by name, so that a person can look at it.
//
//   out/cluster/<name>/
//   ├── .nodecore-cluster        marker: this directory belongs to the launcher
//   ├── launcher.pid             the launcher using it (one at a time)
//   ├── owner.key.pem            the cluster owner's Ed25519 private key
//   ├── dnsmasq.leases, dnsmasq.log
//   └── <node>.disk.img, <node>.parameters.pb, <node>.storage-test-key,
//       <node>.console.log, <node>.qmp.sock

import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const MARKER = ".nodecore-cluster";
const LOCK = "launcher.pid";
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
    writeFileSync(join(dir, MARKER), "created by test/launch; the launcher empties it at the next fresh launch\n");
    writeFileSync(lock, `${process.pid}\n`);
    return new ClusterDir(dir);
  }

  get ownerKey(): string {
    return join(this.path, "owner.key.pem");
  }
  get dhcpLeases(): string {
    return join(this.path, "dnsmasq.leases");
  }
  get dhcpLog(): string {
    return join(this.path, "dnsmasq.log");
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
