// Package testing: helpers shared by the tests of every package.
//
// Tests never sleep to wait for something: they poll a condition with
// eventually() until a deadline, and fail with the last reason if it never
// holds.
//
// Identities (identity.ts) come from testCA(), testNode(ca), testCurator(ca),
// testOwner(ca) and testMembership(node); fakes of services answer through
// rpc's partialService, so that a method nobody gave says UNIMPLEMENTED.

import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { runCommand } from "../supervisor/mod.ts";
import { tmpdir } from "node:os";
import { join } from "node:path";

export { testCA, testCurator, testMembership, testNode, testOwner, type TestMembership, type TestNode, type TestOwner, type TestTls } from "./identity.ts";

export const DEFAULT_EVENTUALLY_TIMEOUT_MS = 10_000;
export const DEFAULT_EVENTUALLY_INTERVAL_MS = 10;

/**
 * Polls `check` until it returns without throwing (and not `false`), and
 * returns its value. Throws the last failure once `timeoutMs` has passed.
 */
export async function eventually<T>(check: () => T | Promise<T>, options: { timeoutMs?: number; intervalMs?: number; what?: string } = {}): Promise<Exclude<T, false>> {
  const deadline = performance.now() + (options.timeoutMs ?? DEFAULT_EVENTUALLY_TIMEOUT_MS);
  let lastError: unknown;
  for (;;) {
    try {
      const result = await check();
      if (result !== false) return result as Exclude<T, false>;
      lastError = new Error("condition returned false");
    } catch (err) {
      lastError = err;
    }
    if (performance.now() > deadline) {
      const reason = lastError instanceof Error ? lastError.message : String(lastError);
      throw new Error(`${options.what ?? "condition"} did not hold in time: ${reason}`, { cause: lastError });
    }
    await Bun.sleep(options.intervalMs ?? DEFAULT_EVENTUALLY_INTERVAL_MS);
  }
}

/** A fresh temporary directory, removed by the returned dispose function. */
export function tempDir(prefix = "nodecore-test-"): { path: string } & Disposable {
  const path = mkdtempSync(join(tmpdir(), prefix));
  return { path, [Symbol.dispose]: () => rmSync(path, { recursive: true, force: true }) };
}

/** Chunk sizes the fill uses, largest first. */
const FILL_CHUNKS = [64 * 2 ** 20, 4 * 2 ** 20, 256 * 2 ** 10, 4 * 2 ** 10];

/**
 * Fills the file system at `dir` to its last block with fallocate, in
 * chunks of falling size: each chunk that no longer fits fails, and the
 * next size down goes on. A failed fallocate on tmpfs gives back what it
 * had taken, so one call for all the free space raced with etcd: etcd saw
 * the disk full and died, the call failed and returned the space, the node
 * saw room and started etcd, and the next call took it away again (a
 * second death the harness made, not the disk; test/faults). Now a failure
 * returns at most one chunk. Returns the files made (removing them frees
 * the space).
 */
export async function fillFileSystem(dir: string): Promise<string[]> {
  const files: string[] = [];
  for (const chunk of FILL_CHUNKS) {
    for (;;) {
      const file = join(dir, `fill-${files.length}`);
      const made = await runCommand(["fallocate", "-l", String(chunk), file]).then(
        () => true,
        () => false,
      );
      if (!made) {
        rmSync(file, { force: true });
        break;
      }
      files.push(file);
    }
  }
  return files;
}

let portCounter = 0;
/** Where tests' ports come from: below Linux's ephemeral range (32768-60999), whose ports any outgoing connection may take between a probe and the real bind. */
const PORT_FLOOR = 10_000;
const PORT_SPAN = 22_000;

/** Whether nothing holds `port` on `host` right now. */
function isFree(host: string, port: number): boolean {
  try {
    Bun.listen({ hostname: host, port, socket: { data() {} } }).stop(true);
    return true;
  } catch {
    return false;
  }
}

/**
 * `count` (at most 10) consecutive TCP ports on `host`, each seen free
 * before it is handed out, spread by process and by call (test files run
 * side by side). They once came from the ephemeral range (listen on port
 * 0): an etcd whose port an outgoing connection took meanwhile could not
 * listen, and its test waited until its timeout.
 */
export function freePorts(count: number, host = "127.0.0.1"): number[] {
  if (count < 1 || count > 10) throw new Error(`freePorts: ${count} ports asked, 1 to 10 allowed`);
  for (let attempt = 0; attempt < 200; attempt++) {
    const base = PORT_FLOOR + ((process.pid * 7 + portCounter++ * 10) % (PORT_SPAN - count));
    const ports = Array.from({ length: count }, (_, i) => base + i);
    if (ports.every((port) => isFree(host, port))) return ports;
  }
  throw new Error(`no ${count} free ports on ${host} in 200 tries`);
}

/** One free TCP port on `host` (see freePorts). */
export async function freePort(host = "127.0.0.1"): Promise<number> {
  return freePorts(1, host)[0]!;
}

/**
 * The system tree `bun run build` lays out (out/system: etcd, containerd,
 * runc, the CNI plugins and Kubernetes, built from their Go modules, and the
 * container images). Tests run the real binaries from there; without it
 * they fail at once, saying how to make it.
 */
export function systemTree(): string {
  // image/layout.ts's DEFAULT_SYSTEM_TREE; internal/ does not import image/.
  const tree = join(import.meta.dir, "..", "..", "out", "system");
  if (!existsSync(join(tree, "usr", "bin", "etcd"))) throw new Error(`no system tree at ${tree}: run 'bun run build' (sh test/setup.sh does)`);
  return tree;
}

/** The system tree's etcd. */
export function treeEtcd(): string {
  return join(systemTree(), "usr", "bin", "etcd");
}

/** mulberry32: a small seeded PRNG, so that a seed replays the same run (the fault suite's faults, the hostile text of the trust tests). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
