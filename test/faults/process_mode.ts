// The fault suite's process mode: three node processes on loopback (the
// node core run from source, test/support), each with its data directory on
// a small tmpfs of its own so that it can be filled up.
//
//   etcd-kill    SIGKILL of a node's etcd; its node starts it again
//   node-kill    SIGKILL of a whole node process (PID 1's stand-in), started
//                again by the runner after a pause
//   leader-kill  the same, for the node whose curator leads (the curator's
//                host process): the leader's lease must expire and every
//                write it had in flight must be fenced
//   disk-full    the node's data file system filled to the last block
//                (fallocate), held, then freed: etcd may die at its next
//                commit, must then wait for space without a crash loop, and
//                come back with its data

import type { Etcd3 } from "etcd3";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { configPaths, loadCredentials } from "../../internal/operator/mod.ts";
import { freeSpace } from "../../internal/localstorage/mod.ts";
import { runCommand } from "../../internal/supervisor/mod.ts";
import { eventually, fillFileSystem, tempDir } from "../../internal/testing/mod.ts";
import type { NodeProcess } from "../support/node_process.ts";
import { etcdClientOf, etcdMembersVia, formProcessCluster, type ProcessCluster } from "../support/process_cluster.ts";
import { PROCESS_FAULTS, RECOVERY_BOUND_MS, type Chance, type FaultDriver, type FaultKind, type InjectedFault } from "./runner.ts";
import { CALL_TIMEOUT_MS } from "./workload.ts";

/**
 * Each node's data file system: etcd keeps up to five 64 MiB log segments
 * and a spare, plus its database and snapshots; a long run fills 256 MiB.
 * (tmpfs takes memory only as it fills; the disk-full fault fills one.)
 */
const DATA_TMPFS = "size=1g";
const ETCD_WAITS = "data partition full: etcd waits for space before it starts";

export class ProcessFaults implements FaultDriver {
  readonly mode = "process";
  readonly kinds = PROCESS_FAULTS;
  readonly recoveryBoundMs = RECOVERY_BOUND_MS;
  readonly callTimeoutMs = CALL_TIMEOUT_MS;
  private readonly killedByUs = new Set<NodeProcess>();

  private constructor(
    private readonly cluster: ProcessCluster,
    private readonly dir: ReturnType<typeof tempDir>,
    private readonly mounts: string[],
    readonly owner: FaultDriver["owner"],
    readonly target: string,
  ) {}

  /** Forms the cluster on loopback hosts `<block>.<firstHost + 1..3>`. */
  static async create(firstHost: number, log: (line: string) => void): Promise<ProcessFaults> {
    const dir = tempDir("nodecore-faults-");
    const mounts: string[] = [];
    const unmount = async () => {
      for (const path of mounts.splice(0)) await runCommand(["umount", "-l", path]).catch(() => {});
    };
    try {
      const cluster = await formProcessCluster(dir.path, firstHost, (step) => log(`cluster: ${step}`), {
        prepare: async (node) => {
          const data = node.layout.data.path;
          await runCommand(["mkdir", "-p", data]);
          await runCommand(["mount", "-t", "tmpfs", "-o", DATA_TMPFS, "tmpfs", data]);
          mounts.push(data);
        },
      });
      const credentials = loadCredentials(configPaths(cluster.ctlDir), cluster.ownerKeyFile);
      const owner = { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey, endpoints: credentials.endpoints };
      return new ProcessFaults(cluster, dir, mounts, owner, cluster.ids.get(cluster.nodes[0]!)!);
    } catch (err) {
      await unmount();
      dir[Symbol.dispose]();
      throw err;
    }
  }

  get nodeNames(): string[] {
    return this.cluster.nodes.map((n) => n.name);
  }

  /** The node whose curator was elected last (the leader, unless it has just lost its lease). */
  private leader(): NodeProcess {
    let best: { node: NodeProcess; time: string } | undefined;
    for (const node of this.cluster.nodes) {
      if (node.exitCode !== undefined) continue;
      const line = node.logs.findLast((l) => l.msg === "elected curator leader");
      if (line && (!best || line.time > best.time)) best = { node, time: line.time };
    }
    if (!best) throw new Error("no node says its curator was elected");
    return best.node;
  }

  async inject(kind: FaultKind, victimIndex: number, chance: Chance, log: (line: string) => void): Promise<InjectedFault> {
    let victim = this.cluster.nodes[victimIndex]!;
    const from = victim.logs.length;
    const notes: string[] = [];
    const sinceFault = () => victim.logs.slice(from);
    const etcdServing = () => {
      if (!sinceFault().some((l) => l.msg === "etcd is serving")) throw new Error(`${victim.name}'s etcd is not serving again yet`);
    };
    switch (kind) {
      case "etcd-kill": {
        // The etcd running now: the last one started may have died since
        // (a full disk can kill it at its next log cut, after the fault that
        // filled it) and its successor not be started yet.
        const pid = await eventually(
          () => {
            const pid = victim.etcdPid();
            if (pid === undefined) throw new Error(`no etcd pid known for ${victim.name}`);
            process.kill(pid, 0);
            return pid;
          },
          { timeoutMs: RECOVERY_BOUND_MS, intervalMs: 100, what: `a running etcd on ${victim.name}` },
        );
        log(`SIGKILL etcd of ${victim.name} (pid ${pid})`);
        process.kill(pid, "SIGKILL");
        return { back: etcdServing, notes };
      }
      case "node-kill":
      case "leader-kill": {
        if (kind === "leader-kill") victim = this.leader();
        const start = victim.logs.length;
        log(`SIGKILL node process ${victim.name}${kind === "leader-kill" ? " (its curator leads)" : ""}`);
        this.killedByUs.add(victim);
        await victim.stop("SIGKILL");
        await Bun.sleep(chance.between(2_000, 5_000));
        victim.start();
        this.killedByUs.delete(victim);
        const node = victim;
        return {
          back: () => {
            const since = node.logs.slice(start);
            if (!since.some((l) => l.msg === "etcd is serving") || !since.some((l) => l.msg === "node is UP")) throw new Error(`${node.name} is not UP again yet`);
          },
          notes: kind === "leader-kill" ? [`leader ${victim.name}`] : notes,
        };
      }
      case "disk-full": {
        const data = victim.layout.data.path;
        log(`fill ${victim.name}'s data file system (${Math.round(freeSpace(data).freeBytes / 2 ** 20)} MiB free)`);
        const fills = await fillFileSystem(data);
        await Bun.sleep(chance.between(3_000, 6_000));
        for (const fill of fills) rmSync(fill);
        const died = sinceFault().filter((l) => l.msg === "runnable died" && String(l.error ?? "").includes("the data partition is full")).length;
        const waits = sinceFault().filter((l) => l.msg === ETCD_WAITS).length;
        notes.push(died ? `etcd died on the full disk ${died}× and waited for space ${waits}×` : "etcd did not notice");
        // Once dead, etcd must wait for space, not start and die again.
        const problems = died > 1 ? [`etcd on ${victim.name} died ${died} times on the full disk: a crash loop`] : [];
        log(`freed ${victim.name}'s data file system: ${notes[0]}`);
        return {
          back: () => {
            // etcd that died must be serving again after the space came back.
            const lines = sinceFault();
            const lastDeath = lines.findLastIndex((l) => l.msg === "runnable died" && String(l.component).endsWith("controlplane"));
            if (lastDeath >= 0 && !lines.slice(lastDeath).some((l) => l.msg === "etcd is serving")) throw new Error(`${victim.name}'s etcd is not serving again yet`);
          },
          notes,
          problems,
        };
      }
      default:
        throw new Error(`fault ${kind} needs the qemu mode`);
    }
  }

  async voters(): Promise<void> {
    const members = await etcdMembersVia(this.cluster.nodes[0]!);
    if (members.length !== 3 || members.some((m) => m.isLearner)) throw new Error("not three voting members");
  }

  memberClients(): Promise<Etcd3[]> {
    return Promise.all(this.cluster.nodes.map(etcdClientOf));
  }

  unexpectedExits(): string[] {
    return this.cluster.nodes.filter((n) => !this.killedByUs.has(n) && n.exitCode !== undefined).map((n) => n.name);
  }

  async stop(): Promise<void> {
    try {
      await this.cluster.stop();
    } finally {
      for (const path of this.mounts.splice(0)) await runCommand(["umount", "-l", path]).catch(() => {});
      this.dir[Symbol.dispose]();
    }
  }
}
