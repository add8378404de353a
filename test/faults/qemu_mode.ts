// The fault suite's qemu mode: three VMs of the node image on a bridge in
// the cluster's network namespace (test/launch), formed as an owner would.
// The runner then moves into that namespace (enterNamespace), so the owner
// clients and etcd reads run in this process, exactly as in process mode.
//
//   vm-power      the plug pulled (qemu quits at once), a pause, booted again
//   partition     nftables in the namespace drops every frame from and to
//                 the node's tap (bridge family: forward, input, output):
//                 the node is cut off from the others and from the owner
//   slow-network  30 % of the node's frames dropped (nftables numgen) and
//                 the rest delayed by qemu's filter-buffer on its NIC, which
//                 releases queued packets every 125 ms (0–125 ms, both ways).
//                 tc netem would be the usual tool, but this host's kernel
//                 has no sch_netem ("Specified qdisc kind is unknown") and
//                 loads no modules; filter-buffer is the nearest qemu has.
//
// Full disks are a process-mode fault: the data file system is inside the
// VM's encrypted partition, and nothing on the host can fill it.

import type { Etcd3 } from "etcd3";
import { X509Certificate } from "node:crypto";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { clientUrl, connectEtcd, type EtcdTls } from "../../internal/consensus/mod.ts";
import { CuratorPool } from "../../internal/curator/client/mod.ts";
import { etcdMembers } from "../../internal/curator/mod.ts";
import { createLogger } from "../../internal/log/mod.ts";
import { configPaths, loadCredentials } from "../../internal/operator/mod.ts";
import { generateKeyPair, rawPublicKey } from "../../internal/pki/mod.ts";
import { CONSOLE, createCluster, enterNamespace, ensureBuilt, formCluster, namespaceName, type Cluster, type NodeVm } from "../launch/mod.ts";
import { QEMU_FAULTS, QEMU_RECOVERY_BOUND_MS, type Chance, type FaultDriver, type FaultKind, type InjectedFault } from "./runner.ts";
import { QEMU_CALL_TIMEOUT_MS } from "./workload.ts";

const CLUSTER_NAME = "faults";
/** 10.77.5.0/24: apart from the e2e's and the dev cluster's subnets. */
const SUBNET_INDEX = 5;
/** Each formation step under TCG. */
const STEP_TIMEOUT_MS = 10 * 60_000;
const TABLE = "nodecore_faults";
/** The delay filter's flush interval: packets wait 0–125 ms. */
const BUFFER_INTERVAL_US = 125_000;
const LOSS_PERCENT = 30;
/** Console lines per VM shown when the cluster did not come back. */
const LAST_LINES = 25;

/**
 * The nft script for the fault table: `verdict` applied to every frame from
 * and to `tap` on the bridge (forwarded between nodes, and to and from the
 * namespace's own stack, where the owner clients and dnsmasq are).
 */
function tapTable(tap: string, verdict: string): string {
  const chains = ["forward", "input", "output"].map((hook) => `  chain ${hook} { type filter hook ${hook} priority 0; iifname "${tap}" ${verdict}; oifname "${tap}" ${verdict}; }`);
  return `table bridge ${TABLE} {\n${chains.join("\n")}\n}\n`;
}

export class QemuFaults implements FaultDriver {
  readonly mode = "qemu";
  readonly kinds = QEMU_FAULTS;
  readonly recoveryBoundMs = QEMU_RECOVERY_BOUND_MS;
  readonly callTimeoutMs = QEMU_CALL_TIMEOUT_MS;
  private readonly stoppedByUs = new Set<NodeVm>();

  private constructor(
    private readonly cluster: Cluster,
    readonly owner: FaultDriver["owner"],
    readonly target: string,
    private readonly etcd: EtcdTls,
    private readonly leaveNamespace: () => void,
  ) {}

  /** nft inside the cluster's namespace. */
  private async nft(script: string): Promise<void> {
    await this.cluster.exec(["nft", "-f", "-"], { stdin: new TextEncoder().encode(script) });
  }

  static async create(options: { imageDir?: string | undefined; log: (line: string) => void }): Promise<QemuFaults> {
    const logger = createLogger("faults");
    if (!options.imageDir) await ensureBuilt(logger.child("build"));
    const cluster = await createCluster({
      name: CLUSTER_NAME,
      nodes: 3,
      subnetIndex: SUBNET_INDEX,
      quiet: true,
      ...(options.imageDir ? { imageDir: options.imageDir } : {}),
      logger: logger.child("launch"),
    });
    let leave: (() => void) | undefined;
    try {
      options.log("cluster: three VMs booting and forming (minutes under TCG)");
      const formed = await formCluster(cluster, { kubernetesController: false, timeoutMs: STEP_TIMEOUT_MS, logger: logger.child("formation") });
      options.log("cluster: formed; the runner moves into its network namespace");
      // As an operator would: cluster info saves every curator as an endpoint, not only node1's (ctl takeownership's).
      const info = await formed.ctl("cluster", "info");
      if (info.exitCode !== 0) throw new Error(`ctl cluster info failed: ${info.stderr.trim()}`);
      leave = enterNamespace(namespaceName(CLUSTER_NAME));
      const credentials = loadCredentials(configPaths(formed.ctlConfig));
      const owner = { ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey, endpoints: credentials.endpoints };
      const key = generateKeyPair();
      const pool = new CuratorPool(owner);
      const response = await pool.call(Management, owner.endpoints, (m) => m.getEtcdCredentials({ publicKey: rawPublicKey(key.publicKey) }, { timeoutMs: 10_000 }));
      pool.close();
      const etcd = { ca: new X509Certificate(response.caCertificate), certificate: new X509Certificate(response.clientCertificate), privateKey: key.privateKey };
      return new QemuFaults(cluster, owner, formed.ids.get(cluster.nodes[0]!.name)!, etcd, leave);
    } catch (err) {
      leave?.();
      await cluster.close({ clean: false });
      throw err;
    }
  }

  get nodeNames(): string[] {
    return this.cluster.nodes.map((n) => n.name);
  }

  private etcdOf(vm: NodeVm): Promise<Etcd3> {
    return connectEtcd({ endpoints: [clientUrl(vm.address)], tls: this.etcd });
  }

  async inject(kind: FaultKind, victimIndex: number, chance: Chance, log: (line: string) => void): Promise<InjectedFault> {
    const vm = this.cluster.nodes[victimIndex]!;
    const notes: string[] = [];
    // The victim's own etcd answers again (a serializable read needs no quorum).
    const etcdAnswers = async () => {
      const client = await this.etcdOf(vm);
      try {
        await client.get("nodecore/fault-probe").serializable(true).exec();
      } finally {
        client.close();
      }
    };
    switch (kind) {
      case "vm-power": {
        log(`pull the plug on ${vm.name}`);
        this.stoppedByUs.add(vm);
        await vm.stop({ clean: false });
        await Bun.sleep(chance.between(3_000, 8_000));
        await vm.start();
        this.stoppedByUs.delete(vm);
        log(`${vm.name} booting again`);
        return {
          back: async () => {
            if (!vm.console.lines.some((l) => CONSOLE.nodeUp.test(l.text))) throw new Error(`${vm.name} is not UP again yet`);
            await etcdAnswers();
          },
          notes,
        };
      }
      case "partition": {
        const holdMs = chance.between(5_000, 15_000);
        log(`cut ${vm.name} off (drop everything on ${vm.tap}) for ${(holdMs / 1000).toFixed(1)} s`);
        await this.nft(tapTable(vm.tap, "drop"));
        await Bun.sleep(holdMs);
        await this.nft(`delete table bridge ${TABLE}\n`);
        return { back: etcdAnswers, notes };
      }
      case "slow-network": {
        const holdMs = chance.between(10_000, 20_000);
        log(`slow ${vm.name}'s network (${LOSS_PERCENT} % loss, 0–${BUFFER_INTERVAL_US / 1000} ms delay) for ${(holdMs / 1000).toFixed(1)} s`);
        await this.nft(tapTable(vm.tap, `numgen random mod 100 < ${LOSS_PERCENT} drop`));
        await vm.qmp().execute("object-add", { "qom-type": "filter-buffer", id: "fault-delay", netdev: "net0", interval: BUFFER_INTERVAL_US });
        await Bun.sleep(holdMs);
        await vm.qmp().execute("object-del", { id: "fault-delay" });
        await this.nft(`delete table bridge ${TABLE}\n`);
        return { back: etcdAnswers, notes };
      }
      default:
        throw new Error(`fault ${kind} needs the process mode`);
    }
  }

  async voters(): Promise<void> {
    const client = await this.etcdOf(this.cluster.nodes.find((n) => n.state === "running")!);
    try {
      const members = await etcdMembers(client);
      if (members.length !== 3 || members.some((m) => m.isLearner)) throw new Error("not three voting members");
    } finally {
      client.close();
    }
  }

  memberClients(): Promise<Etcd3[]> {
    return Promise.all(this.cluster.nodes.map((vm) => this.etcdOf(vm)));
  }

  /** VMs that stopped, or whose kernel panicked (PID 1 exited), without the runner doing it. */
  unexpectedExits(): string[] {
    return this.cluster.nodes.filter((vm) => (vm.state === "stopped" && !this.stoppedByUs.has(vm)) || vm.console.lines.some((l) => /Kernel panic/.test(l.text))).map((vm) => vm.name);
  }

  /** Each VM's last node-core lines (etcd's own output left out), oldest first. */
  lastLines(): string[] {
    return this.cluster.nodes.flatMap((vm) => {
      const own = vm.console.lines.filter((l) => !/controlplane\.output/.test(l.text)).slice(-LAST_LINES);
      return [`${vm.name} (${vm.state}), its last ${own.length} lines:`, ...own.map((l) => `  ${vm.name}| ${l.text}`)];
    });
  }

  async stop(): Promise<void> {
    await this.nft(`delete table bridge ${TABLE}\n`).catch(() => {});
    this.leaveNamespace();
    await this.cluster.close({ clean: false });
  }
}
