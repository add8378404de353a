// Restoring a backup's snapshot: into the data directory of the member that
// a restored cluster starts from, and into a throwaway member, read once,
// to learn what the snapshot holds before anything is trusted to it.
//
//   snapshot ──etcdutl snapshot restore──▶ a data directory (a new cluster
//        of one member, the name and peer URL given; etcd's own checksum
//        is checked on the way)
//   readSnapshot: the same into a scratch directory ─▶ etcd on loopback,
//        plain HTTP, on ports of its own, nothing else listening ─▶ the
//        cluster record, both CAs and the node records (read by the
//        curator's decoder, handed in) ─▶ etcd stopped,
//        the scratch directory deleted
//
// The throwaway member never joins anything: its peer URL is a loopback
// port that only it listens on, and it is killed once read.

import type { Etcd3 } from "etcd3";
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { join } from "node:path";
import type { ClusterRecord, NodeRecord } from "../../proto/gen/curator/state/state_pb.ts";
import type { CA } from "../pki/mod.ts";
import { runCommand, sleep, spawnChild } from "../supervisor/mod.ts";
import { loadEtcd3 } from "../consensus/mod.ts";
import { BackupFormatError } from "./format.ts";

/** How long the throwaway member gets to serve. */
const SERVE_TIMEOUT_MS = 60_000;
/** How long one call to it may take. */
const CALL_TIMEOUT_MS = 10_000;

/**
 * Reads what the serving throwaway member holds, at `revision`: the
 * curator's decoder (internal/curator's `curatorSnapshotState`), handed in
 * by whoever may import the curator. This package sits below the curator,
 * and the curator's key layout is the curator's alone.
 */
export type SnapshotStateReader = (client: Etcd3, revision: number) => Promise<SnapshotState>;

/** What a snapshot holds, as the curator wrote it. */
export interface SnapshotState {
  cluster: ClusterRecord;
  clusterCA: CA;
  etcdCA: CA;
  nodes: NodeRecord[];
  /** The revision the snapshot was taken at. */
  revision: number;
}

/** Turns `snapshotFile` into `dataDir`: a new one-member cluster whose member is `name` at `peerUrl`. */
export async function restoreSnapshot(options: { etcdutl: string; snapshotFile: string; dataDir: string; name: string; peerUrl: string }): Promise<void> {
  rmSync(options.dataDir, { recursive: true, force: true });
  try {
    await runCommand([
      options.etcdutl,
      "snapshot",
      "restore",
      options.snapshotFile,
      `--data-dir=${options.dataDir}`,
      `--name=${options.name}`,
      `--initial-cluster=${options.name}=${options.peerUrl}`,
      `--initial-advertise-peer-urls=${options.peerUrl}`,
      "--initial-cluster-token=nodecore",
    ]);
  } catch (err) {
    rmSync(options.dataDir, { recursive: true, force: true });
    throw new BackupFormatError(`etcdutl could not restore the snapshot: ${(err as Error).message.split("\n")[0]}`);
  }
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/**
 * The throwaway member's revision once it serves; undefined if it exited
 * because a port of its was taken (then it is gone); a BackupFormatError if
 * it exited otherwise or did not serve in time.
 */
async function untilServing(child: ReturnType<typeof spawnChild>, client: Etcd3): Promise<number | undefined> {
  const deadline = Date.now() + SERVE_TIMEOUT_MS;
  for (;;) {
    try {
      // An exit ends the wait at once: the port's other process may hold the call until its deadline.
      const status = await Promise.race([client.maintenance.status(), child.exited.then(() => undefined)]);
      if (status) return Number(status.header.revision);
      throw new Error("etcd exited");
    } catch (err) {
      if (child.exitCode !== null) {
        const said = (await new Response(child.stderr as ReadableStream).text()).trim();
        if (/address already in use/.test(said)) return undefined;
        throw new BackupFormatError(`the snapshot's etcd exited (${child.exitCode}) instead of serving: ${said.split("\n").at(-1) ?? ""}`);
      }
      if (Date.now() > deadline) throw new BackupFormatError(`the snapshot's etcd did not serve within ${SERVE_TIMEOUT_MS / 1000} s: ${(err as Error).message}`);
      await sleep(200);
    }
  }
}

/**
 * How many times the throwaway member is started on new ports when another
 * process took one of them between the probe and etcd's bind.
 */
const PORT_TRIES = 3;

/** Two loopback ports free when probed: the throwaway member's client and peer ports. */
async function probedPorts(): Promise<[number, number]> {
  return [await freePort(), await freePort()];
}

/**
 * Reads what `snapshot` (etcd's snapshot bytes, checked) holds, through a
 * throwaway member in `scratch` (deleted afterwards, whatever happens).
 * `ports` picks its client and peer ports (tests give their own).
 */
export async function readSnapshot(options: {
  etcd: string;
  etcdutl: string;
  snapshot: Uint8Array;
  scratch: string;
  read: SnapshotStateReader;
  ports?: () => Promise<[number, number]>;
}): Promise<SnapshotState> {
  const { scratch } = options;
  rmSync(scratch, { recursive: true, force: true });
  mkdirSync(scratch, { recursive: true, mode: 0o700 });
  let child: ReturnType<typeof spawnChild> | undefined;
  let client: Etcd3 | undefined;
  try {
    const snapshotFile = join(scratch, "snapshot.db");
    writeFileSync(snapshotFile, options.snapshot, { mode: 0o600 });
    const dataDir = join(scratch, "member");
    const { Etcd3 } = await loadEtcd3();
    for (let attempt = 1; ; attempt++) {
      const [clientPort, peerPort] = await (options.ports ?? probedPorts)();
      const peerUrl = `http://127.0.0.1:${peerPort}`;
      const clientUrl = `http://127.0.0.1:${clientPort}`;
      // The peer URL is written into the restored member, so each try restores anew.
      await restoreSnapshot({ etcdutl: options.etcdutl, snapshotFile, dataDir, name: "restore-check", peerUrl });
      // Tracked: under PID 1, an untracked child's exit is reaped before bun sees it (ECHILD).
      child = spawnChild([
        options.etcd,
        "--name=restore-check",
        `--data-dir=${dataDir}`,
        `--listen-peer-urls=${peerUrl}`,
        `--listen-client-urls=${clientUrl}`,
        `--advertise-client-urls=${clientUrl}`,
        "--log-level=error",
      ]);
      // Each call bounded: should another process listen on the port, it may
      // accept the connection and never answer.
      client = new Etcd3({ hosts: [clientUrl], dialTimeout: 2_000, defaultCallOptions: () => ({ deadline: Date.now() + CALL_TIMEOUT_MS }) });
      const revision = await untilServing(child, client);
      if (revision !== undefined) {
        rmSync(snapshotFile);
        return await options.read(client, revision);
      }
      client.close();
      client = undefined;
      // A port taken is no fault of the snapshot's: said as what it is.
      if (attempt === PORT_TRIES) throw new Error(`the snapshot's etcd could not listen: its loopback ports were taken by other processes ${PORT_TRIES} times in a row`);
    }
  } finally {
    client?.close();
    if (child && child.exitCode === null) {
      child.kill("SIGKILL");
      await child.exited;
    }
    rmSync(scratch, { recursive: true, force: true });
  }
}
