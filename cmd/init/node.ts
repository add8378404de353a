// The node's root runnable: what runs under the supervisor once PID 1 has
// its file systems. The tree it builds:
//
//   root
//   ├── network      DHCP on the NIC (VM only) ──▶ address
//   ├── hostname     the VM named after its node ID, once it has one
//   ├── enrolment    parameters ─▶ bootstrap | register | join ──▶ membership
//   ├── roleserve    controlplane, curatorconnection, rolefetch, statuspush, heartbeat, kubernetes
//   ├── update       a VM's trial of a new version: confirmed once the node rejoined, else rolled back
//   ├── nodemgmt     the owner's view into this node: logs, services, power, updates (port 7836)
//   ├── shareholder  other consensus members' cold-start shares, from boot on (port 7837)
//   └── status       narrates where the node stands on the console

import { join } from "node:path";
import { Value } from "../../internal/event/mod.ts";
import { enrolmentRunnable, forgetCluster, type ClusterMembership, type DataStorage, type EnrolmentState, type ParameterPaths } from "../../internal/cluster/mod.ts";
import { scrubFreeSpace, type BootSelection, type StorageLayout } from "../../internal/localstorage/mod.ts";
import { otherSlot, readSlotFailure, slotControl, trialRunnable } from "../../internal/update/mod.ts";
import type { Network } from "../../internal/network/mod.ts";
import { newRoleServerValues, nodeCallReporter, roleServer, type RuntimeSetup } from "../../internal/roleserve/mod.ts";
import { PERSIST_INTERVAL_MS, persistBoot, readBoot, rotateBoots, type BootEnd, type LogTree } from "../../internal/logtree/mod.ts";
import { nodeManagementRunnable, type PowerRequest } from "../../internal/nodemgmt/mod.ts";
import { NodeMetrics } from "../../internal/metrics/mod.ts";
import { shareHolderRunnable } from "../../internal/coldstart/mod.ts";
import { failingRunnables, failingSummary, sleep, untilCancelled, type Runnable, type RunnableDump } from "../../internal/supervisor/mod.ts";
import { curatorSnapshotState, SUPERVISION_LINE, type ConsensusJoinTiming } from "../../internal/curator/mod.ts";
import { memberQuota } from "../../internal/consensus/mod.ts";
import { TEST_FAULT, VERSION } from "../../internal/version/mod.ts";
import { sethostname } from "../../internal/sys/mod.ts";
import { CLOCK_LINE, TIME_LINE, clockWatch, timeSyncGate, timeSyncRunnable, type TimeSync } from "../../internal/clock/mod.ts";

export interface NodeConfig {
  layout: StorageLayout;
  parameterPaths: ParameterPaths & { sealed: string };
  storage: DataStorage;
  /** A VM's NIC, configured by DHCP; or a fixed address when the node runs as a process. */
  network: { kind: "dhcp"; network: Network } | { kind: "fixed"; address: string };
  /** Where etcd's client port listens: loopback on a VM; the node's own address when nodes share a host. */
  etcdClientHost: "loopback" | "node-address";
  /** The etcd binary (default: the node image's). */
  etcdBinary?: string;
  /** The curator leader's waits for etcd learners (default: the product's); node processes in tests shorten them. */
  consensusJoinTiming?: ConsensusJoinTiming;
  /** Where etcdutl is, mounting what it takes (a VM's system image); a restore needs it. */
  etcdutl?: () => string;
  kubernetesBinDir?: string;
  /** Makes the system image's files available to the Kubernetes roles, their binaries and the container runtime (a VM mounts it); throws, naming what is missing. */
  prepareSystemImage?: () => void;
  /** The container runtime's place (see internal/containerd); absent where the node cannot run containers. */
  runtime?: RuntimeSetup;
  /** Why this node runs no kubelet, if it runs none (see roleserve's KubernetesOptions.noKubelet). */
  noKubelet?: string;
  /** The system slot this boot runs (a VM's, from PID 1's slot choice): updates, rollbacks and the trial of a new version. */
  selection?: BootSelection;
  /** Overwrite the ESP's free space when a secret leaves it (a real FAT ESP; not a node process's directory). */
  scrubEsp: boolean;
  /** Whether chronyd may set the clock (a VM's own); a node process shares its host's, and only measures. */
  setClock: boolean;
  /** Whether the node names its machine after itself (a VM); a node process shares its host's name. */
  setHostname?: boolean;
  onFatal: (message: string) => void;
  /** The node's log rings, served by node management. */
  logs: LogTree;
  /** When this boot began (ms since the epoch): the node's status says so, and a reboot changes it. */
  bootMs: number;
  /** The supervision tree as data. */
  services: () => RunnableDump[];
  /** Reboots or powers off the node the way the ACPI button does. */
  power: (action: PowerRequest, why: string) => void;
  /** How this boot is ending, once the node began to stop: the last write of its logs says so. */
  bootEnd?: () => BootEnd | undefined;
}

/** Where the previous boots' logs are kept: on the data partition, encrypted with it. */
export function bootLogDir(layout: StorageLayout): string {
  return join(layout.data.node.path, "boot-logs");
}

/** The service line that says how the previous boot ended. */
const PREVIOUS_BOOT_LINE = "previous-boot";

/** How often the supervision line is brought up to date. */
const SUPERVISION_INTERVAL_MS = 3_000;

export function nodeRoot(config: NodeConfig): Runnable {
  // Once per boot, whatever restarts below: the last boot's logs move back one place.
  let rotated = false;
  // Once per boot too: the node's metrics (a restart below keeps counting).
  let roleValues = newRoleServerValues();
  const timeSync = new Value<TimeSync>();
  const metrics = new NodeMetrics({
    runnables: config.services,
    logDrops: () => config.logs.drops,
    etcd: () => roleValues.localConsensus.peek()?.metrics,
  });
  return async (ctx) => {
    ctx.logger.info("node core started", { version: VERSION, pid: process.pid, ...(config.selection ? { slot: config.selection.slot } : {}) });
    if (TEST_FAULT) ctx.logger.warn(`this is a test build with the fault ${TEST_FAULT} compiled in: it is broken on purpose (internal/version)`);
    const selection = config.selection;
    const enrolment = new Value<EnrolmentState>();
    // The parameters' NTP servers, once enrolment has read them (or the ESP's copy).
    const timeServers = new Value<readonly string[]>();
    const membership = new Value<ClusterMembership>();
    roleValues = newRoleServerValues();
    const network = config.network;
    const address = async (signal: AbortSignal) => (network.kind === "fixed" ? network.address : (await network.network.getAddress({ signal })).address);

    if (network.kind === "dhcp") ctx.run("network", network.network.run);
    if (selection) {
      ctx.run(
        "update",
        trialRunnable({
          layout: config.layout,
          selection,
          version: VERSION,
          rejoined: async (signal) => void (await roleValues.statusPushed.get({ signal })),
          reboot: (why) => config.power("reboot", why),
        }),
      );
    }
    ctx.run(
      "enrolment",
      enrolmentRunnable({
        layout: config.layout,
        paths: config.parameterPaths,
        storage: config.storage,
        address,
        state: enrolment,
        membership,
        onFatal: config.onFatal,
        // A restore reads its snapshot with the curator's decoder: the curator's key layout is the curator's alone.
        snapshotState: curatorSnapshotState,
        timeGate: (signal) => timeSyncGate(timeSync, { signal }),
        timeServers,
        ...(config.etcdBinary ? { etcdBinary: config.etcdBinary } : {}),
        ...(config.etcdutl ? { etcdutl: config.etcdutl } : {}),
        ...(config.scrubEsp ? { scrubEsp: () => scrubFreeSpace(config.layout.esp.path).then(() => {}) } : {}),
      }),
    );
    ctx.run(
      "roleserve",
      roleServer(
        {
          layout: config.layout,
          membership,
          etcdClientHost: (m) => (config.etcdClientHost === "loopback" ? "127.0.0.1" : m.address),
          ...(config.etcdBinary ? { etcdBinary: config.etcdBinary } : {}),
          ...(config.consensusJoinTiming ? { consensusJoinTiming: config.consensusJoinTiming } : {}),
          ...(config.etcdutl ? { etcdutl: config.etcdutl } : {}),
          storage: config.storage,
          ...(config.kubernetesBinDir ? { kubernetesBinDir: config.kubernetesBinDir } : {}),
          ...(config.prepareSystemImage ? { prepareSystemImage: config.prepareSystemImage } : {}),
          ...(config.runtime ? { runtime: config.runtime } : {}),
          ...(config.noKubelet ? { noKubelet: config.noKubelet } : {}),
          // The DHCP lease's resolvers: where the cluster DNS sends names outside the cluster.
          resolvers: async (signal: AbortSignal) => (network.kind === "dhcp" ? (await network.network.getAddress({ signal })).dnsServers : []),
          bootMs: config.bootMs,
          metrics,
          ...(config.scrubEsp ? { scrubEsp: () => scrubFreeSpace(config.layout.esp.path).then(() => {}) } : {}),
          ...(selection ? { slots: () => ({ slot: selection.slot, failure: readSlotFailure(config.layout, otherSlot(selection.slot)) }) } : {}),
        },
        roleValues,
      ),
    );
    ctx.run(
      "nodemgmt",
      nodeManagementRunnable({
        membership,
        logs: config.logs,
        services: config.services,
        power: config.power,
        ...(selection ? { slots: slotControl(config.layout, selection, VERSION) } : {}),
        // Each reboot, reset, recovery and refusal here goes to the cluster's audit trail.
        report: nodeCallReporter(roleValues.connection, ctx.logger.child("nodemgmt")),
        metrics,
        pastBoot: (age) => readBoot(bootLogDir(config.layout), age - 1 + (rotated ? 1 : 0)),
        etcd: () => {
          const local = roleValues.localConsensus.peek();
          return local ? { member: local.member, quotaBytes: memberQuota(config.layout.data.etcd.data) } : undefined;
        },
        recovery: roleValues.recovery,
        images: () => roleValues.imageStore.peek(),
        reset: (wipe) => forgetCluster({ layout: config.layout, storage: config.storage, wipe, ...(config.scrubEsp ? { scrubEsp: () => scrubFreeSpace(config.layout.esp.path).then(() => {}) } : {}) }),
      }),
    );
    // Whether the wall clock was set under the node (internal/clock).
    ctx.run("clock", clockWatch({ report: (state, message) => roleValues.board.report(CLOCK_LINE, state, message) }));
    // Keeping it right: chronyd with the parameters' NTP servers and the DHCP lease's (option 42), on the "time" line.
    ctx.run(
      "time",
      timeSyncRunnable({
        servers: async (signal) => {
          const configured = await timeServers.get({ signal });
          const leased = network.kind === "dhcp" ? (await network.network.getAddress({ signal })).ntpServers : [];
          return [...new Set([...configured, ...leased])];
        },
        stateDir: join(config.layout.ephemeral.path, "chrony"),
        sync: timeSync,
        report: (state, message) => roleValues.board.report(TIME_LINE, state, message),
        setClock: config.setClock,
      }),
    );
    // The machine's name is the node's ID once it has one: Kubernetes
    // labels its apiserver's identity lease with the hostname, and the
    // kernel's default, "(none)", is not a valid label value.
    if (config.setHostname) {
      ctx.run("hostname", async (h) => {
        h.signalHealthy();
        const { credentials } = await membership.get({ signal: h.signal });
        sethostname(credentials.nodeId);
        h.logger.info("hostname set", { hostname: credentials.nodeId });
        h.signalDone();
      });
    }
    // This boot's logs, kept on the data partition for the next boot to read (internal/logtree/boots.ts).
    ctx.run("bootlog", async (b) => {
      b.signalHealthy();
      const state = await enrolment.waitFor((s) => s.phase === "member" || s.phase === "fatal", { signal: b.signal });
      if (state.phase !== "member") return void b.signalDone();
      const dir = bootLogDir(config.layout);
      if (!rotated) {
        rotated = true;
        const previous = rotateBoots(dir);
        if (previous?.end) {
          b.logger.info("the previous boot's logs are kept (ctl node logs --boot -1)", {
            began: new Date(previous.bootMs).toISOString(),
            ended: new Date(previous.end.timeMs).toISOString(),
            cause: previous.end.cause,
          });
          roleValues.board.report(PREVIOUS_BOOT_LINE, "ended", `${new Date(previous.end.timeMs).toISOString()}: ${previous.end.cause} (ctl node logs --boot -1)`);
        }
      }
      const header = { bootMs: config.bootMs, version: VERSION };
      try {
        for (;;) {
          persistBoot(dir, config.logs, header);
          await sleep(PERSIST_INTERVAL_MS, b.signal);
        }
      } finally {
        const end = config.bootEnd?.();
        try {
          persistBoot(dir, config.logs, { ...header, ...(end ? { end } : {}) });
        } catch (err) {
          b.logger.warn("could not keep this boot's logs for the next", { error: (err as Error).message });
        }
      }
    });
    ctx.run("shareholder", shareHolderRunnable({ layout: config.layout, address, sealed: roleValues.sealed, directory: roleValues.directory }));
    ctx.run("status", async (status) => {
      status.signalHealthy();
      const nodeAddress = await address(status.signal);
      status.logger.info("address acquired", { address: nodeAddress });
      const state = await enrolment.waitFor((s) => s.phase === "member" || s.phase === "fatal", { signal: status.signal });
      if (state.phase !== "member") return void status.signalDone();
      status.logger.info("storage mounted, node is part of the cluster", { node: state.nodeId, via: state.decision });
      using roles = roleValues.roles.watch();
      // Once per change of the role names: the roles value also changes
      // with the consensus members' peers, which the line does not name.
      let printed: string | undefined;
      for (;;) {
        const current = await roles.getWhen((r) => r !== undefined, { signal: status.signal });
        const names = [
          ...(current?.consensusMember ? ["consensus"] : []),
          ...(current?.kubernetesController ? ["kubernetes-controller"] : []),
          ...(current?.kubernetesWorker ? ["kubernetes-worker"] : []),
        ];
        const line = names.join(",") || "none";
        if (line === printed) continue;
        printed = line;
        status.logger.info("node is UP", { node: state.nodeId, address: nodeAddress, roles: line });
      }
    });
    // The supervision line: which runnables keep failing, if any. The
    // cluster folds it into the node's health (DEGRADED), so a crash-looping
    // etcd shows in ctl node list even while heartbeats arrive.
    ctx.run("supervision", async (s) => {
      s.signalHealthy();
      for (;;) {
        const failing = failingRunnables(config.services());
        if (failing.length === 0) roleValues.board.report(SUPERVISION_LINE, "ok", "no runnable is failing");
        else roleValues.board.report(SUPERVISION_LINE, "degraded", failingSummary(failing));
        await sleep(SUPERVISION_INTERVAL_MS, s.signal);
      }
    });
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}
