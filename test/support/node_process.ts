// Nodes as plain processes on loopback: the node core (cmd/init/main.ts run
// from source) with a root directory standing in for its disk and a
// loopback address of its own (127.0.0.0/8 is all local). Used by the
// process-level cluster tests.

import { create, toBinary } from "@bufbuild/protobuf";
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { NodeParametersSchema, type NodeParameters } from "../../proto/gen/api/configuration_pb.ts";
import { storageLayout } from "../../internal/localstorage/mod.ts";
import { eventually, systemTree, treeEtcd } from "../../internal/testing/mod.ts";
import { generateKeyPair, privateKeyPem, rawPublicKey } from "../../internal/pki/mod.ts";

const INIT = join(import.meta.dir, "..", "..", "cmd", "init", "main.ts");
const CTL = join(import.meta.dir, "..", "..", "cmd", "ctl", "main.ts");
const STOP_GRACE_MS = 20_000;

export interface LogLine {
  time: string;
  level: string;
  component: string;
  msg: string;
  [field: string]: unknown;
}

/** A loopback address block for this test process: 127.<a>.<b>.x. */
export function loopbackBlock(): (n: number) => string {
  const a = 100 + (process.pid % 100);
  const b = Math.floor(process.pid / 100) % 250;
  return (n) => `127.${a}.${b}.${n}`;
}

/**
 * Kills (SIGKILL) the containerd shims on this host whose command line
 * names a path under `root`, and returns their pids. A node process that
 * ends leaves its containerd's shims behind: a shim detaches from
 * containerd (its own session, reparented to init), and on a host without
 * a cgroup v2 hierarchy the node has no runtime cgroup to empty. A VM's
 * power-off ends them; a process test's stop did not: this machine kept a
 * `containerd-shim-runc-v2 … -address <root>/ephemeral/containerd/…` of
 * the controller test long after the test ended. The process launcher
 * (test/launch/process_launcher.ts) calls it too. Each shim names its
 * containerd's socket, under the node's root. Only shims: what else a
 * stopped node leaves (an etcd it could not tie to itself) is what the
 * node tests check the node's next start for.
 */
export function killLeftShims(root: string): number[] {
  const prefix = root.endsWith("/") ? root : `${root}/`;
  const killed: number[] = [];
  for (const entry of readdirSync("/proc")) {
    const pid = Number(entry);
    if (!Number.isInteger(pid) || pid <= 1 || pid === process.pid) continue;
    let args: string[];
    try {
      args = readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // gone already
    }
    if (!/(^|\/)containerd-shim[^/]*$/.test(args[0] ?? "") || !args.some((a) => a.startsWith(prefix))) continue;
    try {
      process.kill(pid, "SIGKILL");
      killed.push(pid);
    } catch {
      // gone meanwhile
    }
  }
  return killed;
}

/** The etcd binary node processes run: the system tree's, built from its Go module. */
export const ETCD_COMMAND = treeEtcd();

export class NodeProcess {
  readonly logs: LogLine[] = [];
  /** The system tree the node runs etcd, the runtime and Kubernetes from (a test may give its own). */
  system = systemTree();
  private child: ReturnType<typeof Bun.spawn> | undefined;
  private reading: Promise<void> | undefined;

  constructor(
    readonly name: string,
    readonly root: string,
    readonly address: string,
    private readonly echo = process.env.NODECORE_TEST_ECHO === "1",
  ) {
    mkdirSync(root, { recursive: true });
  }

  get layout() {
    return storageLayout(this.root);
  }

  /** The pid of the etcd this node started last (at or after log line `from`), as its log says; undefined if none. */
  etcdPid(from = 0): number | undefined {
    const line = this.logs.slice(from).findLast((l) => l.msg === "process started" && l.command === ETCD_COMMAND);
    return line ? Number(line.pid) : undefined;
  }

  /** The exit code once the process has ended on its own (or been stopped); undefined while it runs. */
  get exitCode(): number | null | undefined {
    return this.child ? (this.child.exitCode ?? undefined) : null;
  }

  writeParameters(params: NodeParameters): void {
    mkdirSync(join(this.layout.esp.parameters, ".."), { recursive: true });
    writeFileSync(this.layout.esp.parameters, toBinary(NodeParametersSchema, create(NodeParametersSchema, params)));
  }

  /** Starts the node; `env` adds to (or overrides) the test's environment. */
  start(env: Record<string, string> = {}): void {
    const child = Bun.spawn([process.execPath, INIT, "--root", this.root, "--address", this.address, "--system", this.system], {
      stdout: "pipe",
      stderr: "pipe",
      env: { ...process.env, NODECORE_LOG_FORMAT: "json", ...env },
    });
    this.child = child;
    this.reading = this.read(child.stderr as ReadableStream<Uint8Array>);
  }

  private async read(stream: ReadableStream<Uint8Array>): Promise<void> {
    const decoder = new TextDecoder();
    let buffered = "";
    for await (const chunk of stream) {
      buffered += decoder.decode(chunk, { stream: true });
      let newline: number;
      while ((newline = buffered.indexOf("\n")) >= 0) {
        const line = buffered.slice(0, newline);
        buffered = buffered.slice(newline + 1);
        try {
          this.logs.push(JSON.parse(line) as LogLine);
        } catch {
          this.logs.push({ time: "", level: "raw", component: "", msg: line });
        }
        if (this.echo) process.stderr.write(`[${this.name}] ${line}\n`);
      }
    }
  }

  /** Waits for a log line matching `match`, after `from` lines (to skip earlier boots). */
  async waitForLog(match: (line: LogLine) => boolean, options: { timeoutMs?: number; from?: number; what?: string } = {}): Promise<LogLine> {
    return eventually(
      () => {
        const found = this.logs.slice(options.from ?? 0).find(match);
        if (!found) throw new Error(`no such log line yet (last: ${this.logs.at(-1)?.component} ${this.logs.at(-1)?.msg})`);
        return found;
      },
      { timeoutMs: options.timeoutMs ?? 60_000, intervalMs: 50, what: `${this.name}: ${options.what ?? "log line"}` },
    );
  }

  /** Stops the node as a clean shutdown would (SIGTERM), or kills it. */
  async stop(how: "SIGTERM" | "SIGKILL" = "SIGTERM"): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill(how);
    const timer = setTimeout(() => child.kill("SIGKILL"), STOP_GRACE_MS);
    await child.exited;
    clearTimeout(timer);
    await this.reading;
    this.child = undefined;
    // Its runtime's shims, which a VM's power-off would end.
    killLeftShims(this.root);
  }
}

/** The command line that runs out/ctl (from source) with a config dir, for callers that keep it running (ctl node logs -f). */
export function ctlCommand(configDir: string, ...args: string[]): string[] {
  return [process.execPath, CTL, "--config", configDir, ...args];
}

/** A node's service lines (its status) as `ctl node list --json` shows them, by name. */
export async function serviceLines(
  run: (...args: string[]) => Promise<{ code: number; stdout: string; stderr: string }>,
  id: string,
): Promise<Map<string, { name: string; state: string; message: string }>> {
  const result = await run("node", "list", "--json");
  if (result.code !== 0) throw new Error(`ctl node list failed: ${result.stderr}`);
  const nodes = JSON.parse(result.stdout) as { id: string; services: { name: string; state: string; message: string }[] }[];
  return new Map((nodes.find((n) => n.id === id)?.services ?? []).map((s) => [s.name, s]));
}

/** Runs out/ctl (from source) with a config dir; asynchronous, so in-process servers keep serving. */
export async function ctl(configDir: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = Bun.spawn(ctlCommand(configDir, ...args), { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

/** A node process with an owner: what the single-node process tests and benches start from. */
export interface OwnedNode {
  /** The owner's ctl, with the owner's key. */
  ctl: (...args: string[]) => Promise<{ code: number; stdout: string; stderr: string }>;
  /** Bootstraps a cluster with the owner's key, waits until UP, takes ownership; the UP log line (node ID in `node`). */
  bootstrap(options?: { timeoutMs?: number }): Promise<LogLine>;
}

/** The node process `node` (not started yet) and an owner whose files live in `dir`. */
export function ownedNode(node: NodeProcess, dir: string): OwnedNode {
  const owner = generateKeyPair();
  const ownerKeyFile = join(dir, "owner.key");
  writeFileSync(ownerKeyFile, privateKeyPem(owner.privateKey));
  const run = (...args: string[]) => ctl(join(dir, "ctl"), "--owner-key", ownerKeyFile, ...args);
  return {
    ctl: run,
    async bootstrap(options = {}) {
      node.writeParameters(create(NodeParametersSchema, { cluster: { case: "clusterBootstrap", value: { ownerPublicKey: rawPublicKey(owner.publicKey) } } }));
      node.start();
      const up = await node.waitForLog((l) => l.msg === "node is UP", { what: "UP", ...options });
      const taken = await run("takeownership", node.address);
      if (taken.code !== 0) throw new Error(`ctl takeownership ${node.address} failed: ${taken.stderr}`);
      return up;
    },
  };
}
