// Three nodes under qemu form a cluster the way an owner forms one, and
// etcd (checked with the real etcdctl) follows the roles:
//
//   node1 bootstraps ─ owner takes ownership and takes node1's
//     kubernetes-controller role away until the Kubernetes step (under TCG
//     an apiserver slows every step after each node1 boot by minutes) ─
//     node2, node3 register ─ approved ─ UP
//   consensus role on node2, node3 ─ etcdctl: three voting members; data written
//   node1 powered off ─ owner still served (node2/node3) ─ node1 back: JoinNode
//     through a survivor, its etcd member in sync (reads the data locally)
//   all three powered off ─ node2's disk alone (on the host) holds no cluster
//     half and does not open ─ all three booted: each combines the shares the
//     others hold, three voters again, data intact (README, "Cold start")
//   (--long) ctl cluster update to v2 (bun run image --version) while three owner
//     clients write and read labels: one member at a time, each taking what
//     its slot a holds as well, sent the rest, kexec'd into slot b, confirmed
//     once rejoined; every acknowledged write is there (the fault suite's
//     check), every node HEALTHY at v2, and from here on every boot of
//     node1 and node2 kexecs slot b
//   (--long) ctl node rollback node3 --activate --wait: back on slot a (v1), no
//     kexec, HEALTHY, confirmed
//   consensus role removed from node3 ─ etcdctl: two members
//   Kubernetes: node1 gets kubernetes-controller again; node2 and node3
//     get kubernetes-worker ─ the owner's kubectl (ctl kubeconfig, the built
//     kubectl) sees both Ready, and so does ctl cluster health ─ a pod on each from the preloaded image,
//     kubectl logs and exec
//   a user's application: ctl cluster registry set for the launcher's
//     registry (its own CA, a password on stdin) ─ the two-layer hello image
//     pulled by name on node2 from the registry, then on node3 from node2 by
//     digest (the peer mirror), and serving ─ a wrong password shown
//     as 401 Unauthorized in kubectl describe, a pod's own imagePullSecrets
//     pulling meanwhile, Running once the login is right again ─ a host whose first mirror is down pulled from its second
//     ─ the registry stopped: ctl image import onto node2, a pod of it runs there
//   a user's StatefulSet: a 64 Mi claim of the default class on node3, a 128 Mi
//     write refused, the kubelet's volume stats, grown to 192 Mi while running
//   ctl node reboot node3 --wait, a user's web application (two replicas, a
//     PodDisruptionBudget) serving throughout: drained (web's replica and the StatefulSet's
//     pod evicted, web asked every 200 ms throughout), UP, HEALTHY,
//     uncordoned; the StatefulSet's pod back on node3 with its data, the
//     room back after the claim
//   a deleted pod leaves no container ─ the role taken from node3: its Node
//     and its containers go
//   day-2: ctl node logs and services read node2; ctl node logs --boot -1
//     reads what it logged before that reboot, and why it rebooted
//   ctl node reset --wipe node3 (its parameters taken back on the host) ─
//     deleted, no LUKS key slot left (read on the host), boots into "no parameters"
//   quorum lost for good: ctl cluster recover refused while node2 answers ─
//     node2 unplugged, its disk thrown away ─ recover --from node1: one
//     member, writable, the write made before the loss still there
//
// VMs run concurrently (three under TCG: slow). Disks and consoles stay in
// out/cluster/e2e3/.

import { fromBinary } from "@bufbuild/protobuf";
import { readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { SealedConfigurationSchema } from "../../proto/gen/api/configuration_pb.ts";
import { NodeRecordSchema } from "../../proto/gen/curator/state/state_pb.ts";
import { dataPartitionKey } from "../../internal/cluster/keys.ts";
import { ESP_PARTITION_NUMBER } from "../../image/layout.ts";
import {
  BRIDGE_NAME,
  CONSOLE,
  CTL_BINARY,
  createCluster,
  ETCDCTL_BINARY as ETCDCTL,
  formCluster,
  GATEWAY_NAME,
  httpBody,
  httpGetCommand,
  KUBECTL_BINARY as KUBECTL,
  runHostCommand,
  type Cluster,
  type FormedCluster,
} from "../launch/mod.ts";
import { partitionContains, partitionExtent, readLuks2Header } from "./disk_inspection.ts";
import { eventually } from "../../internal/testing/mod.ts";
import { TEST_IMAGE_REF } from "../../internal/containerd/mod.ts";
import { quantityBytes } from "../../internal/kubernetes/mod.ts";
import { assert, assertEqual, e2eCleanup, e2eTest, type E2eContext } from "./harness.ts";
import { readManifest } from "../../image/mod.ts";
import { configPaths, loadCredentials } from "../../internal/operator/mod.ts";
import { enterNamespace, namespaceName } from "../launch/mod.ts";
import { checkHistory } from "../faults/checker.ts";
import { QEMU_CALL_TIMEOUT_MS, Workload } from "../faults/workload.ts";
import { buildUpdateImage, nextVersion } from "./updates.ts";
import { autoscalingStep } from "./autoscaling.ts";
import { networkPolicyStep } from "./network_policy.ts";
import { HELLO_PORT, helloImage, HOST_BUSYBOX, readBusybox } from "../../image/mod.ts";
import { HELLO_REPOSITORY, HELLO_TAG, type ContainerRegistryServer } from "../launch/registry.ts";
import { HttpProber, PROBE_EVERY_MS, RETRY_WITHIN_MS } from "../launch/http_prober.ts";

/** Per step: three VMs under TCG on two cores are slow. */
const STEP_TIMEOUT_MS = 600_000;
const POLL_MS = 3_000;
/** A member's cold start: its cluster half combined from the shares the others hold (internal/cluster/flow_join.ts). */
const FROM_SHARES = /cluster half is whole again from its shares/;
/** A member's join through a curator that answered (flow_join.ts), with which one. */
const FROM_CURATOR = /got the cluster unlock key curator=(\S+)/;
const ETCD_CLIENT_PORT = 2379;
/** The disk image's partitions (image/disk.ts). */
const DATA_PARTITION_NUMBER = 2;

/**
 * The Kubernetes step's deadline (the harness's default is 15 min). Its
 * longest part is kube-apiserver's start on node1 once the step gives it
 * the controller role. Its first start writes its bootstrap objects (RBAC
 * roles and bindings, priority classes, ...) into an etcd that answers in
 * 100-300 ms with three VMs on two emulated cores; when it still started
 * at the bootstrap it answered /readyz 4.5 and 5.2 min later (two
 * clean-clone CI runs on 2026-11-26, both past 15 min for the whole step).
 * The workers' Nodes are Ready about a minute after that.
 */
const KUBERNETES_STEP_TIMEOUT_MS = 28 * 60_000;

/** How long a ctl call right after a reboot is run again when the cluster drops it. */
const AFTER_REBOOT_RETRY_MS = 60_000;

let cluster: Cluster | undefined;
let formed: FormedCluster | undefined;
/** The Kubernetes step's workers (node2, node3), their marker pods, the pages they serve and the Service's ClusterIP (node3's pod behind it), for the steps after it. */
let kubernetesWorkers: { ids: string[]; names: string[]; clusterIp: string; pages: string[] } | undefined;
let etcdDir = "";

function need<T>(value: T | undefined, what: string): T {
  assert(value !== undefined, `${what} is not there: an earlier step failed`);
  return value;
}

/** Runs etcdctl inside the cluster's namespace with the owner's etcd client certificate. */
async function etcdctl(endpointNode: string, ...args: string[]): Promise<string> {
  const c = need(cluster, "the cluster");
  const endpoint = `https://${c.node(endpointNode).address}:${ETCD_CLIENT_PORT}`;
  const result = await c.exec(
    [ETCDCTL, "--cacert", join(etcdDir, "ca.pem"), "--cert", join(etcdDir, "client.pem"), "--key", join(etcdDir, "client.key"), "--endpoints", endpoint, "--command-timeout=15s", ...args],
    { okExitCodes: [0, 1, 2, 4, 5] },
  );
  if (result.exitCode !== 0) throw new Error(`etcdctl ${args.join(" ")} via ${endpointNode}: ${result.stderr.trim()}`);
  return result.stdout;
}

async function members(via: string): Promise<{ name: string; isLearner: boolean }[]> {
  const listed = JSON.parse(await etcdctl(via, "--write-out=json", "member", "list")) as { members: { name?: string; isLearner?: boolean }[] };
  return listed.members.map((m) => ({ name: m.name ?? "", isLearner: Boolean(m.isLearner) }));
}

e2eTest("three nodes form a cluster: bootstrap, takeownership, register, approve, consensus roles", async (ctx: E2eContext) => {
  cluster = await createCluster({ name: "e2e3", nodes: 3, subnetIndex: 3, quiet: !ctx.verbose, imageDir: ctx.imageDir, logger: ctx.logger.child("launch") });
  const started = performance.now();
  formed = await formCluster(cluster, { kubernetesController: false, timeoutMs: STEP_TIMEOUT_MS, logger: ctx.logger.child("formation") });
  ctx.report(`three-node cluster formed in qemu (all UP, three voting members): ${((performance.now() - started) / 1000).toFixed(1)} s`);
  assertEqual(formed.ids.size, 3, "nodes with IDs");
});

e2eTest("etcdctl sees three voting etcd members, and data written to etcd is there", async () => {
  const f = need(formed, "the formed cluster");
  etcdDir = join(need(cluster, "the cluster").dir.path, "etcd");
  // Right after formation the VMs are busy (three under TCG on two cores),
  // and the owner knows only node1 yet: an operator would run it again.
  await eventually(
    async () => {
      const credentials = await f.ctl("etcd", "credentials", etcdDir);
      assertEqual(credentials.exitCode, 0, `ctl etcd credentials (${credentials.stderr.trim()})`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "etcd client credentials" },
  );
  const list = await members("node1");
  assertEqual(list.length, 3, "etcd members");
  assert(
    list.every((m) => !m.isLearner),
    `no learners left: ${JSON.stringify(list)}`,
  );
  assertEqual(
    list
      .map((m) => m.name)
      .sort()
      .join(","),
    [...f.ids.values()].sort().join(","),
    "member names are the node IDs",
  );
  await etcdctl("node2", "put", "e2e/written-before", "survives node1");
  assertEqual((await etcdctl("node3", "get", "e2e/written-before", "--print-value-only")).trim(), "survives node1", "value read back");
  // The owner's client follows every curator from now on.
  await eventually(
    async () => {
      const info = await f.ctl("cluster", "info");
      assertEqual(info.exitCode, 0, `ctl cluster info (${info.stderr.trim()})`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "ctl cluster info" },
  );
});

e2eTest("with node1 powered off the cluster keeps serving the owner, and node1 rejoins through the survivors", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const node1 = c.node("node1");
  await node1.stop({ clean: true });
  const poweredOff = performance.now();
  ctx.logger.info("node1 powered off");
  // The owner's view of node1's health, asked alongside the writes below.
  const timedOut = eventually(
    async () => {
      const result = await f.ctl("node", "list", "--json");
      if (result.exitCode !== 0) throw new Error(result.stderr.trim());
      const health = (JSON.parse(result.stdout) as { id: string; health: string }[]).find((n) => n.id === f.ids.get("node1"))?.health;
      assertEqual(health, "HEARTBEAT_TIMEOUT", "node1's health");
      return performance.now();
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node1 shown as HEARTBEAT_TIMEOUT" },
  );
  let lastRefusal = "";
  await eventually(
    async () => {
      // A label: a write that starts nothing on the node (a role would).
      const result = await f.ctl("node", "label", f.ids.get("node2")!, "e2e-failover=written");
      if (result.exitCode !== 0) {
        const refusal = result.stderr.trim().split("\n").at(-1) ?? "";
        if (refusal !== lastRefusal) ctx.logger.info("owner write not served yet", { after: `${((performance.now() - poweredOff) / 1000).toFixed(1)}s`, ctl: refusal });
        lastRefusal = refusal;
        throw new Error(refusal);
      }
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "an owner write served by node2 or node3" },
  );
  // A figure, not an assertion (issue: fast failover).
  ctx.report(`node1 powered off → the owner's next write succeeded: ${((performance.now() - poweredOff) / 1000).toFixed(1)} s`);
  await eventually(
    async () => {
      const listed = await f.ctl("node", "list", "--json");
      assertEqual(listed.exitCode, 0, `ctl node list (${listed.stderr.trim()})`);
      const list = JSON.parse(listed.stdout) as { id: string; labels: string[] }[];
      assert(list.find((n) => n.id === f.ids.get("node2"))!.labels.includes("e2e-failover=written"), "the owner's write took effect");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the owner's write listed" },
  );
  // A figure, not an assertion: it includes the polling interval and ctl's own start-up in the namespace.
  ctx.report(`node1 powered off → shown as HEARTBEAT_TIMEOUT: ${(((await timedOut) - poweredOff) / 1000).toFixed(1)} s (polled every ${POLL_MS / 1000} s)`);

  const restarted = performance.now();
  const from = node1.console.lines.length;
  await node1.start();
  const unlocked = await node1.waitForConsole(FROM_CURATOR, STEP_TIMEOUT_MS);
  const via = /curator=(\S+)/.exec(unlocked.text)![1]!;
  // The curator is logged as "<node id>@<address>:<port>".
  const viaAddress = via.slice(via.indexOf("@") + 1);
  assert(viaAddress.startsWith(`${c.node("node2").address}:`) || viaAddress.startsWith(`${c.node("node3").address}:`), `node1 joined through a survivor (it used ${via})`);
  assert(
    node1.console.lines.slice(from).every((l) => !/cold start/.test(l.text)),
    "node1 did not fall back to a cold start",
  );
  await node1.waitForConsole(CONSOLE.nodeUp, STEP_TIMEOUT_MS);
  ctx.report(`node1 reboot → rejoined and UP: ${((performance.now() - restarted) / 1000).toFixed(1)} s`);
  // Its member is back and in sync: a serializable read answers from node1's own copy.
  await eventually(async () => assertEqual((await etcdctl("node1", "get", "e2e/written-before", "--print-value-only", "--consistency=s")).trim(), "survives node1", "node1's copy"), {
    timeoutMs: STEP_TIMEOUT_MS,
    intervalMs: POLL_MS,
    what: "node1's etcd member in sync",
  });
  const back = await members("node2");
  assertEqual(back.filter((m) => !m.isLearner).length, 3, "voting members after node1 rejoined");
});

/** The cluster half of a node's data key, as the cluster's records hold it (read with the owner's etcd credentials). */
async function clusterHalfOf(nodeId: string): Promise<Uint8Array> {
  const listed = JSON.parse(await etcdctl("node2", "--write-out=json", "get", `/nodecore/nodes/${nodeId}`)) as { kvs?: { value: string }[] };
  const value = listed.kvs?.[0]?.value;
  assert(value !== undefined, `no record of ${nodeId} in etcd`);
  return fromBinary(NodeRecordSchema, Buffer.from(value, "base64")).clusterUnlockKey;
}

/** Whether the LUKS2 header on the DATA partition of `disk` opens with `key`, tried on the host (read-only loop device). */
async function luksOpensWith(disk: string, key: Uint8Array): Promise<boolean> {
  const data = await partitionExtent(disk, DATA_PARTITION_NUMBER);
  const loop = (await runHostCommand(["losetup", "--find", "--show", "--read-only", "--offset", String(data.startBytes), "--sizelimit", String(data.sizeBytes), disk])).stdout.trim();
  try {
    const tried = await runHostCommand(["cryptsetup", "open", "--test-passphrase", "--type", "luks2", "--key-file", "-", loop], { stdin: key, okExitCodes: [0, 1, 2] });
    return tried.exitCode === 0;
  } finally {
    await runHostCommand(["losetup", "--detach", loop]);
  }
}

/** A file from the FAT ESP of a powered-off node's disk, read on the host with mtools. */
async function espFile(disk: string, path: string): Promise<Buffer> {
  const esp = await partitionExtent(disk, ESP_PARTITION_NUMBER);
  const out = join(need(cluster, "the cluster").dir.path, `esp-${Date.now()}.bin`);
  await runHostCommand(["mcopy", "-n", "-i", `${disk}@@${esp.startBytes}`, `::${path}`, out]);
  try {
    return readFileSync(out);
  } finally {
    rmSync(out, { force: true });
  }
}

e2eTest("all three powered off and booted again: the cluster comes back with no operator, by threshold shares, and no disk alone opens its data", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const names = ["node1", "node2", "node3"];
  // Every member has split its cluster half among the other two and erased
  // it from its ESP: its status says "shared" (console lines are per boot,
  // and node1 has booted again since it made its shares).
  await eventually(
    async () => {
      const listed = await f.ctl("node", "list", "--json");
      if (listed.exitCode !== 0) throw new Error(listed.stderr.trim());
      const nodes = JSON.parse(listed.stdout) as { id: string; services: { name: string; state: string; message: string }[] }[];
      for (const node of nodes) {
        const line = node.services.find((s) => s.name === "coldstart");
        assertEqual(line?.state, "shared", `${node.id}'s coldstart status (${line?.message ?? "none"})`);
      }
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "every member's shares made" },
  );
  const half = await clusterHalfOf(f.ids.get("node2")!);
  await etcdctl("node3", "put", "e2e/written-before-cold-start", "survives a full stop");

  await Promise.all(names.map((name) => c.node(name).stop({ clean: true })));
  ctx.logger.info("all three powered off");

  // node2's disk alone, on the host: its ESP no longer holds its cluster half, in any file or freed cluster ...
  const disk = c.node("node2").files.disk;
  const esp = await partitionExtent(disk, ESP_PARTITION_NUMBER);
  assert(!partitionContains(disk, esp, Buffer.from(half)), "node2's cluster half is still somewhere on its ESP partition");
  const sealed = fromBinary(SealedConfigurationSchema, await espFile(disk, "/nodecore/sealed.pb"));
  assertEqual(sealed.coldStartClusterUnlockKey.length, 0, "bytes of cold-start key in node2's sealed configuration");
  assertEqual(sealed.unlockShares?.holders.length ?? 0, 2, "holders of node2's shares");
  // ... so what the disk holds does not open its data, while the same method with the cluster's half does.
  for (const [what, candidate] of [
    ["the node half with itself", sealed.nodeUnlockKey],
    ["the node half with the join key", sealed.joinKey],
    ["the node half with zeros", new Uint8Array(32)],
  ] as const) {
    assert(!(await luksOpensWith(disk, dataPartitionKey(sealed.nodeUnlockKey, candidate))), `node2's data opened from its disk alone (${what})`);
  }
  assert(await luksOpensWith(disk, dataPartitionKey(sealed.nodeUnlockKey, half)), "the control failed: node2's data does not open with its two real halves");
  ctx.report("node2's disk alone (ESP + DATA, on the host): no cluster half on the ESP partition, its data does not open; with the cluster's half it does");

  const started = performance.now();
  // Each boot has a console of its own: what follows reads this boot's.
  await Promise.all(names.map((name) => c.node(name).start()));
  // Nothing opens a member's data but its shares until etcd has a quorum
  // again, so a majority must come back by combining theirs. A member that
  // lags may then find a curator answering before its own shares are
  // combined, and take its cluster half from there, as any joining member
  // does: that is the design, not a failure.
  const via = new Map<string, string>();
  for (const name of names) {
    const node = c.node(name);
    await eventually(
      () => {
        const lines = node.console.lines;
        const fromShares = lines.some((l) => FROM_SHARES.test(l.text));
        const fromCurator = lines.find((l) => FROM_CURATOR.test(l.text));
        const last = `${lines.at(-1)?.text ?? "nothing yet"}${node.state === "running" ? "" : ` (qemu ${node.state}, last exit ${JSON.stringify(node.lastExit)})`}`;
        assert(fromShares || fromCurator, `${name} has neither combined its shares nor got its cluster half from a curator; its last line: ${last}`);
        assert(
          lines.some((l) => CONSOLE.nodeUp.test(l.text)),
          `${name} is not UP yet; its last line: ${last}`,
        );
        via.set(name, fromShares ? "its shares" : `a curator (${FROM_CURATOR.exec(fromCurator!.text)![1]})`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: `${name} back from the cold start` },
    );
  }
  const combined = [...via].filter(([, how]) => how === "its shares").length;
  assert(combined >= 2, `only ${combined} of 3 members came back by their shares; a quorum (2) must: ${[...via].map(([n, how]) => `${n} by ${how}`).join(", ")}`);
  await eventually(
    async () => {
      const list = await members("node1");
      assertEqual(list.filter((m) => !m.isLearner).length, 3, "voting members after the cold start");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "three voters after the cold start" },
  );
  ctx.report(`full stop → all three powered on → three voters, every node UP: ${((performance.now() - started) / 1000).toFixed(1)} s (${[...via].map(([n, how]) => `${n} by ${how}`).join(", ")})`);
  assertEqual((await etcdctl("node1", "get", "e2e/written-before-cold-start", "--print-value-only")).trim(), "survives a full stop", "a write from before the full stop");
  assertEqual((await etcdctl("node3", "get", "e2e/written-before", "--print-value-only")).trim(), "survives node1", "the first write");
});

// The rolling update and the rollback after it are long steps (bun run
// e2e --long): too long for CI's budget again. They ran as long steps until
// 2026-11-26 (793.0 s and 50.6 s under qemu, each member 174-265 s: system
// image, kernel and 74 of the initramfs's 82.8 MiB copied on the node, 8.8
// MiB sent, kexec'd, rejoined, HEALTHY), then in CI (384.9-634.0 s). On
// 2026-11-28 the host ran TCG at half its usual speed: the update took
// 763.1 s, and the whole suite 91.5 min, past CI's 90-minute kill. CI keeps
// ctl node update, the trial boot, the rollback of a version that never
// rejoins and a power cut while writing in node_boot.e2e.ts. They come back
// into CI once a restart by kexec straight from the running node and an
// update that writes the next member while the last one reboots make them
// cheaper (issue 47), or with issue 50's update that keeps a running
// application serving. docs/development.md has CI's time.

/** The rolling update's deadline: the cluster healthy first, then three members, each written, kexec'd and rejoined under TCG. */
const CLUSTER_UPDATE_TIMEOUT_MS = 35 * 60_000;
/** How long the cluster has to be HEALTHY before the update (node1's kube-apiserver takes minutes to start after the cold start). */
const HEALTHY_WAIT_S = 900;
/** How long the owner's writes have to be acknowledged again once the update is done. */
const ACK_AFTER_UPDATE_MS = 120_000;

e2eTest(
  "ctl cluster update moves the three members from v1 to v2, one at a time, while owner writes keep succeeding: none lost, every node HEALTHY at v2",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const v1 = readManifest(ctx.imageDir).version;
    const v2 = await buildUpdateImage(ctx, { version: nextVersion(v1, 1), name: "v2" });
    const target = f.ids.get("node1")!;
    // As an operator would: ctl refuses to update a node that is not
    // HEALTHY, and right after the cold start node1's Kubernetes controller
    // is still starting (DEGRADED for minutes under TCG).
    const healthy = await f.ctl("cluster", "health", "--wait", "--wait-timeout", String(HEALTHY_WAIT_S));
    assertEqual(healthy.exitCode, 0, `ctl cluster health --wait before the update (${healthy.stdout.trim()})`);
    // The workload's clients are the fault suite's: owner clients inside the cluster's network namespace.
    const leave = enterNamespace(namespaceName(c.name));
    let result: { exitCode: number; stdout: string; stderr: string };
    let workload: Workload | undefined;
    let final = new Map<string, (string | null)[]>();
    const started = performance.now();
    try {
      const credentials = loadCredentials(configPaths(f.ctlConfig));
      workload = new Workload({ ca: credentials.ca, certificate: credentials.certificate, privateKey: credentials.key.privateKey, endpoints: credentials.endpoints }, target, QEMU_CALL_TIMEOUT_MS);
      result = await f.ctl("cluster", "update", "--image", v2.bundle, "--max-unavailable", "1", "--json");
      ctx.logger.info(`ctl cluster update exited ${result.exitCode}`, { stderr: result.stderr.trim().slice(-2000) });
      ctx.logger.info(`the owner's clients during the update: ${workload.tally()}`);
      assertEqual(result.exitCode, 0, `ctl cluster update (${result.stderr.trim()})`);
      // A write acknowledged after the last node came back: the cluster serves at v2.
      const after = performance.now();
      await eventually(
        () =>
          assert(
            workload!.acked.some((t) => t >= after),
            `no write acknowledged since the update ended (${workload!.acked.length} in all)`,
          ),
        { timeoutMs: ACK_AFTER_UPDATE_MS, intervalMs: 200, what: "a write acknowledged after the update" },
      );
      await workload.stop();
      const labels = await workload.call(async (m) => {
        for await (const node of m.getNodes({}, { timeoutMs: 10_000 })) if (node.id === target) return new Map(node.labels.map((l) => [l.key, l.value]));
        throw new Error(`node ${target} is not listed`);
      });
      const keys = new Set(workload.history.ops.map((o) => o.key));
      final = new Map([...keys].map((key) => [key, [labels.get(key) ?? null]]));
    } finally {
      await workload?.stop();
      leave();
    }
    const seconds = (performance.now() - started) / 1000;
    const summary = JSON.parse(result.stdout) as { version: string; seconds?: number; steps: { name: string; outcome: string; seconds?: number }[] };
    assertEqual(summary.version, v2.version, "the version ctl updated to");
    assertEqual(summary.steps.filter((s) => s.outcome === "updated").length, 3, `members updated (${result.stdout.trim()})`);
    // v2 changes only the init: each node copies the system image, the kernel and the initramfs's start from its slot a, and is sent the rest.
    const took = result.stderr
      .split("\n")
      .filter((line) => /took system, kernel \([\d.]+ MiB\) from its booted slot; sending initramfs \([\d.]+ MiB of [\d.]+ MiB: it had the first [\d.]+ MiB alike\), version, cmdline/.test(line));
    assertEqual(took.length, 3, `nodes that took the unchanged files from their booted slot (${result.stderr.trim().slice(-2000)})`);
    const check = checkHistory(workload.history.ops, final);
    assertEqual(check.violations.map((v) => v.message).join("; "), "", "violations in the owner's writes and reads");
    assert(check.acknowledged > 0, "no write was acknowledged during the update");
    const listed = await f.ctl("node", "list", "--json");
    assertEqual(listed.exitCode, 0, `ctl node list (${listed.stderr.trim()})`);
    const nodes = JSON.parse(listed.stdout) as { id: string; version?: string; health?: string }[];
    for (const node of nodes) {
      assertEqual(node.version, v2.version, `${node.id}'s version`);
      assertEqual(node.health, "HEALTHY", `${node.id}'s health`);
    }
    for (const vm of c.nodes) assert(vm.console.find(/I root booted slot b, once, as a trial by kexec/) !== undefined, `${vm.name} should have booted slot b by kexec`);
    ctx.report(
      `ctl cluster update ${v1} → ${v2.version}, three consensus members one at a time (streamed, written, kexec'd, rejoined): ${summary.seconds ?? seconds.toFixed(1)} s; per node ${summary.steps.map((s) => `${s.name} ${s.seconds ?? "?"} s`).join(", ")}; ${check.acknowledged} owner writes acknowledged throughout, none lost`,
    );
  },
  { timeoutMs: CLUSTER_UPDATE_TIMEOUT_MS, long: true },
);

e2eTest(
  "ctl node rollback node3 --activate --wait: node3 boots slot a again (v1, the firmware's own build: no kexec), rejoins on it, and stays there",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const v1 = readManifest(ctx.imageDir).version;
    const id3 = f.ids.get("node3")!;
    const node3 = c.nodes.find((n) => n.name === "node3")!;
    const started = performance.now();
    const result = await f.ctl("node", "rollback", id3, "--activate", "--wait", "--json");
    assertEqual(result.exitCode, 0, `ctl node rollback --activate --wait (${result.stderr.trim()})`);
    const seconds = (performance.now() - started) / 1000;
    const answer = JSON.parse(result.stdout) as { slot?: string; version?: string };
    assertEqual(answer.slot, "a", "the slot ctl rolled node3 back to");
    assertEqual(answer.version, v1, "the version ctl rolled node3 back to");
    const chosen = node3.console.find(CONSOLE.slotChosen);
    assert(chosen !== undefined && /booting slot a .*: the running build/.test(chosen.text), `node3 should boot slot a without a kexec: ${chosen?.text}`);
    const described = await f.ctl("node", "describe", id3, "--json");
    assertEqual(described.exitCode, 0, `ctl node describe (${described.stderr.trim()})`);
    const status = JSON.parse(described.stdout) as { version?: string; slot?: string; health?: string; updateFailure?: unknown };
    assertEqual(status.version, v1, "node3's version after the rollback");
    assertEqual(status.slot, "a", "node3's slot after the rollback");
    assertEqual(status.health, "HEALTHY", "node3's health after the rollback");
    assertEqual(status.updateFailure, undefined, "an update failure after a rollback that rejoined");
    ctx.report(`ctl node rollback node3 --activate --wait, v2 → ${v1} (slot a, no kexec), back HEALTHY: ${seconds.toFixed(1)} s`);
  },
  // It rolls back what the rolling update installed: long with it.
  { long: true },
);

e2eTest("removing the consensus role from node3 shrinks etcd to two members", async () => {
  const f = need(formed, "the formed cluster");
  await eventually(
    async () => {
      const result = await f.ctl("node", "roles", "unset", f.ids.get("node3")!, "consensus");
      if (result.exitCode !== 0) throw new Error(result.stderr.trim());
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "consensus role removed from node3" },
  );
  await eventually(
    async () => {
      const names = (await members("node1")).map((m) => m.name).sort();
      assertEqual(names.join(","), [f.ids.get("node1")!, f.ids.get("node2")!].sort().join(","), "etcd members");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "etcd without node3" },
  );
  await need(cluster, "the cluster")
    .node("node3")
    .waitForConsole(/consensus role removed: deleting this node's etcd data/, STEP_TIMEOUT_MS);
});

/** ctl node roles <action> <id> <role>, run again until the cluster takes it (an operator would). */
async function setRole(f: FormedCluster, id: string, action: "set" | "unset", role: "kubernetes-controller" | "kubernetes-worker"): Promise<void> {
  await eventually(
    async () => {
      const result = await f.ctl("node", "roles", action, id, role);
      if (result.exitCode !== 0) throw new Error(result.stderr.trim());
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: `${role} ${action} on ${id}` },
  );
}

/** The node's services line for `name`, from the owner's node list. */
async function serviceLine(f: FormedCluster, id: string, name: string): Promise<{ state: string; message: string } | undefined> {
  const listed = await f.ctl("node", "list", "--json");
  if (listed.exitCode !== 0) throw new Error(listed.stderr.trim());
  const nodes = JSON.parse(listed.stdout) as { id: string; services: { name: string; state: string; message: string }[] }[];
  return nodes.find((n) => n.id === id)?.services.find((s) => s.name === name);
}

/** The built kubectl, run in the cluster's namespace with the owner's kubeconfig (what the launcher's summary prints). */
async function kubectl(...args: string[]): Promise<string> {
  const c = need(cluster, "the cluster");
  const result = await c.exec([KUBECTL, "--kubeconfig", join(c.dir.path, "owner.kubeconfig"), "--request-timeout=20s", ...args], { okExitCodes: [0, 1] });
  if (result.exitCode !== 0) throw new Error(`kubectl ${args.join(" ")}: ${result.stderr.trim()}`);
  return result.stdout;
}

interface NodeObject {
  metadata: { name: string };
  status: { conditions?: { type: string; status: string; message?: string }[]; nodeInfo?: { kubeletVersion?: string } };
}

/** The port the marker pods serve their page on (busybox httpd). */
const POD_HTTP_PORT = 8080;

/** A pod on one node, from the preloaded busybox image: says where it runs, serves `page` on port 8080, then stays. */
function markerPod(name: string, nodeId: string, page: string): unknown {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels: { app: name } },
    spec: {
      nodeName: nodeId,
      terminationGracePeriodSeconds: 1,
      containers: [
        {
          name: "main",
          image: TEST_IMAGE_REF,
          imagePullPolicy: "Never",
          command: ["sh", "-c", `echo marker ${name} on $NODE; busybox mkdir -p /www; echo ${page} > /www/index.html; busybox httpd -p ${POD_HTTP_PORT} -h /www; exec sleep 3600`],
          env: [{ name: "NODE", valueFrom: { fieldRef: { fieldPath: "spec.nodeName" } } }],
        },
      ],
    },
  };
}

/**
 * A user's application for the reboot step (issue 50): a Deployment of two
 * replicas that prefer different nodes, each serving its own name over HTTP,
 * ready only once it answers, and draining its connections before it stops
 * (a preStop pause while the Service's endpoints drop it, as Kubernetes'
 * own advice for graceful shutdown has it); a NodePort Service; and a
 * PodDisruptionBudget that keeps one available.
 */
function webApplication(): unknown {
  const labels = { app: "web" };
  return {
    apiVersion: "v1",
    kind: "List",
    items: [
      {
        apiVersion: "apps/v1",
        kind: "Deployment",
        metadata: { name: "web", labels },
        spec: {
          replicas: 2,
          selector: { matchLabels: labels },
          template: {
            metadata: { labels },
            spec: {
              terminationGracePeriodSeconds: 20,
              affinity: {
                podAntiAffinity: {
                  preferredDuringSchedulingIgnoredDuringExecution: [{ weight: 100, podAffinityTerm: { labelSelector: { matchLabels: labels }, topologyKey: "kubernetes.io/hostname" } }],
                },
              },
              containers: [
                {
                  name: "main",
                  image: TEST_IMAGE_REF,
                  imagePullPolicy: "Never",
                  command: ["sh", "-c", `busybox mkdir -p /www; echo "web $HOSTNAME" > /www/index.html; exec busybox httpd -f -p ${POD_HTTP_PORT} -h /www`],
                  readinessProbe: { tcpSocket: { port: POD_HTTP_PORT }, periodSeconds: 2 },
                  lifecycle: { preStop: { exec: { command: ["sleep", "8"] } } },
                },
              ],
            },
          },
        },
      },
      { apiVersion: "v1", kind: "Service", metadata: { name: "web" }, spec: { type: "NodePort", selector: labels, ports: [{ port: 80, targetPort: POD_HTTP_PORT }] } },
      { apiVersion: "policy/v1", kind: "PodDisruptionBudget", metadata: { name: "web" }, spec: { minAvailable: 1, selector: { matchLabels: labels } } },
    ],
  };
}

/**
 * Runs `during` while tcpdump captures into `file` what crosses the
 * cluster's bridge and matches `filter`; returns what `during` returned.
 */
async function capture<T>(c: Cluster, filter: string, file: string, during: () => Promise<T>): Promise<T> {
  rmSync(file, { force: true });
  const tcpdump = Bun.spawn(c.commandInNamespace(["tcpdump", "-i", BRIDGE_NAME, "-U", "-n", "-w", file, filter]), { stdout: "ignore", stderr: "pipe" });
  const stderr = tcpdump.stderr.getReader();
  let said = "";
  while (!/listening on/.test(said)) {
    const chunk = await stderr.read();
    if (chunk.done) throw new Error(`tcpdump ended before it listened: ${said.trim()}`);
    said += new TextDecoder().decode(chunk.value);
  }
  try {
    return await during();
  } finally {
    await Bun.sleep(1_000);
    tcpdump.kill("SIGINT");
    await tcpdump.exited;
  }
}

/** The body of `http://host:port/` fetched in `pod` (kubectl exec). */
async function podHttpGet(pod: string, host: string, port: number): Promise<string> {
  return httpBody(await kubectl("exec", pod, "--", "sh", "-c", httpGetCommand(host, port)), `http://${host}:${port}/ from ${pod}`);
}

/**
 * The registry step's deadline: six pods pulled under TCG, one that fails
 * first and waits out the kubelet's image backoff, and an import. It took
 * 752.6 s on a slow day (2026-11-28), and ran past 15 minutes later that
 * day, while in its last part (the offline import), all checks before it
 * passed.
 */
const REGISTRY_STEP_TIMEOUT_MS = 25 * 60_000;

/** ctl as the owner with `stdin` piped in (a password: never on the command line). */
async function ctlWithStdin(c: Cluster, args: string[], stdin: string): Promise<{ exitCode: number; stdout: string; stderr: string }> {
  return c.exec([CTL_BINARY, "--config", c.dir.ctlConfig, ...args], { stdin, okExitCodes: [0, 1, 2] });
}

/** A pod's phase, its node and the reasons its container waits, from kubectl. */
async function podState(name: string): Promise<{ phase: string; node: string; ip: string; waiting: string }> {
  const pod = JSON.parse(await kubectl("get", "pod", name, "-o", "json")) as {
    spec: { nodeName?: string };
    status: { phase?: string; podIP?: string; containerStatuses?: { state?: { waiting?: { reason?: string } } }[] };
  };
  return {
    phase: pod.status.phase ?? "",
    node: pod.spec.nodeName ?? "",
    ip: pod.status.podIP ?? "",
    waiting: (pod.status.containerStatuses ?? []).map((s) => s.state?.waiting?.reason ?? "").join(","),
  };
}

/** A pod of `image` (its default command: the page on HELLO_PORT), on `nodeId` if given; the default pull policy unless `pullPolicy`. */
function helloPod(name: string, image: string, nodeId?: string, pullPolicy?: string): unknown {
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: { name, labels: { app: "hello-e2e" } },
    spec: {
      ...(nodeId ? { nodeName: nodeId } : {}),
      terminationGracePeriodSeconds: 1,
      containers: [{ name: "main", image, ...(pullPolicy ? { imagePullPolicy: pullPolicy } : {}) }],
    },
  };
}

/** The registry step's host that exists nowhere but through its mirrors. */
const MIRRORED_HOST = "images.nodecore.test";

/**
 * The registry step: its checks, then nothing of it is left for the next
 * step, whether it passed or not (a failed run's pods made the next step's
 * count of node2's containers fail as well).
 */
async function registryStep(ctx: E2eContext, c: Cluster, f: FormedCluster, registry: ContainerRegistryServer, ids: string[], fetcher: string): Promise<void> {
  let passed = false;
  try {
    await registryChecks(ctx, c, f, registry, ids, fetcher);
    passed = true;
  } finally {
    const cleanup = async () => {
      // Waited for: not waiting moved the pods' ends under the next steps,
      // on node2's one vCPU, and the deletion step waited 222 s for them
      // instead of 64 s (a CI check of 2026-11-29).
      await kubectl("delete", "pod", ...ids.map((_, i) => `hello-${i + 2}`), "hello-wrong", "hello-secret", "hello-mirror", "hello-offline", "--ignore-not-found", "--wait=true", "--timeout=300s");
      await kubectl("delete", "secret", "hello-pull", "--ignore-not-found");
      // The right login, in case the step stopped while it was wrong: the steps after it pull from the registry too.
      const login = await ctlWithStdin(c, ["cluster", "registry", "login", registry.host, "--username", registry.options.username, "--password-stdin"], `${registry.options.password}\n`);
      assertEqual(login.exitCode, 0, `ctl cluster registry login (${login.stderr.trim()})`);
      const removed = await f.ctl("cluster", "registry", "remove", MIRRORED_HOST);
      assertEqual(removed.exitCode, 0, `ctl cluster registry remove (${removed.stderr.trim()})`);
    };
    if (passed) await cleanup();
    else await cleanup().catch((err: unknown) => ctx.logger.warn(`the failed registry step's cleanup: ${(err as Error).message}`));
  }
}

async function registryChecks(ctx: E2eContext, c: Cluster, f: FormedCluster, registry: ContainerRegistryServer, ids: string[], fetcher: string): Promise<void> {
  const image = `${registry.host}/${HELLO_REPOSITORY}:${HELLO_TAG}`;
  const apply = async (name: string, object: unknown) => {
    const file = join(c.dir.path, `${name}.json`);
    writeFileSync(file, JSON.stringify(object));
    await kubectl("apply", "-f", file, "--request-timeout=60s");
  };
  const running = (name: string) =>
    eventually(
      async () => {
        const state = await podState(name);
        assertEqual(state.phase, "Running", `pod ${name}'s phase (waiting: ${state.waiting || "-"})`);
        return state;
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: `pod ${name} Running` },
    );

  // The owner sets the registry up, as the README says; the password goes in on stdin.
  const set = await ctlWithStdin(
    c,
    ["cluster", "registry", "set", registry.host, "--ca", registry.caFile, "--username", registry.options.username, "--password-stdin"],
    `${registry.options.password}\n`,
  );
  assertEqual(set.exitCode, 0, `ctl cluster registry set (${set.stderr.trim()})`);
  const listed = await f.ctl("cluster", "registry", "list");
  assertEqual(listed.exitCode, 0, `ctl cluster registry list (${listed.stderr.trim()})`);
  assert(listed.stdout.includes(registry.host) && listed.stdout.includes(registry.options.username), `the listing names the host and the login's user:\n${listed.stdout}`);
  assert(!listed.stdout.includes(registry.options.password), "the listing shows no password");

  // The image, pulled by name with the default pull policy: node2 from the
  // registry, then node3, which resolves the tag at the registry and takes
  // the manifest and layers from node2 (the peer mirror).
  const pods = ids.map((id, i) => `hello-${i + 2}`);
  const states: Awaited<ReturnType<typeof podState>>[] = [];
  const pulled = performance.now();
  await apply(pods[0]!, helloPod(pods[0]!, image, ids[0]));
  states.push(await running(pods[0]!));
  const fromRegistry = (performance.now() - pulled) / 1000;
  const registryLogAt = readFileSync(registry.logFile, "utf8").length;
  const second = performance.now();
  await apply(pods[1]!, helloPod(pods[1]!, image, ids[1]));
  states.push(await running(pods[1]!));
  ctx.report(
    `${image} (two layers, built here) pulled with its CA and password → Running: on node2 from the registry ${fromRegistry.toFixed(1)} s; then on node3 from node2 (the peer mirror) ${((performance.now() - second) / 1000).toFixed(1)} s`,
  );
  assertEqual(states.map((s) => s.node).join(","), ids.join(","), "the pods' nodes");
  // The registry answered node3 the tag, and no blob: the image's bytes came
  // from node2. The manifest by digest comes from node2 too, unless node2
  // did not answer the peer mirror within its deadline (PEER_HEADER_TIMEOUT_MS:
  // a slow peer is passed over by design); a run on 2026-11-29 saw node2's
  // VM (an etcd voter and a worker on one TCG vCPU) stall for seconds right
  // then, and the manifest came from the registry. Which it was is reported.
  const node3Address = c.node("node3").address;
  const askedByNode3 = readFileSync(registry.logFile, "utf8")
    .slice(registryLogAt)
    .split("\n")
    .filter((line) => line.includes(`http.request.remoteaddr="${node3Address}:`) && line.includes('msg="response completed"'));
  // The registry's log quotes a URI only when it must: http.request.uri=/v2/apps/hello/manifests/1
  const tagUri = new RegExp(`http\\.request\\.uri="?/v2/${HELLO_REPOSITORY}/manifests/${HELLO_TAG}"?(?:\\s|$)`);
  const manifestUri = new RegExp(`http\\.request\\.uri="?/v2/${HELLO_REPOSITORY}/manifests/sha256:[0-9a-f]{64}"?(?:\\s|$)`);
  assert(
    askedByNode3.some((line) => tagUri.test(line)) && askedByNode3.every((line) => tagUri.test(line) || manifestUri.test(line)),
    `node3 asked the registry for the tag, and no blob:\n${askedByNode3.join("\n")}`,
  );
  const manifestFromRegistry = askedByNode3.some((line) => manifestUri.test(line) && /http\.request\.method=GET/.test(line));
  const node3Log = await f.ctl("node", "logs", ids[1]!, "-n", "3000");
  const fromPeer = node3Log.stdout.split("\n").filter((line) => line.includes("image content pulled from a peer") && line.includes(ids[0]!));
  assert(
    fromPeer.length >= (manifestFromRegistry ? 2 : 3),
    `node3's log names what node2 served it (${manifestFromRegistry ? "" : "the manifest, "}the configuration, the layers):\n${fromPeer.join("\n") || node3Log.stdout.split("\n").slice(-20).join("\n")}`,
  );
  ctx.report(
    `node3's log: ${fromPeer.length} pieces of ${image} pulled from node2; the registry served node3 the tag's resolution${manifestFromRegistry ? " and the manifest (node2 did not answer the peer mirror in time), no blob" : " only"}`,
  );
  // Its default command serves its page: the application runs.
  const paged = performance.now();
  assertEqual(
    await eventually(() => podHttpGet(fetcher, states[1]!.ip, HELLO_PORT), { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the hello page" }),
    "hello from nodecore",
    "the page node3's hello pod serves",
  );
  ctx.report(`node3's hello page answered node2's pod after ${((performance.now() - paged) / 1000).toFixed(1)} s`);

  // Pulls that do not wait on each other run at once (under TCG each pod
  // takes a minute or more; one after the other they cost CI minutes): a
  // wrong password on node2 beside a pod's own imagePullSecrets on node3;
  // then, with the login right again, the failing pod's next try beside a
  // host whose first mirror is down.
  const wrong = await ctlWithStdin(c, ["cluster", "registry", "login", registry.host, "--username", registry.options.username, "--password-stdin"], "not-the-password\n");
  assertEqual(wrong.exitCode, 0, `ctl cluster registry login (${wrong.stderr.trim()})`);
  // A pod's own imagePullSecrets work beside the cluster's login (which is wrong now).
  await kubectl(
    "create",
    "secret",
    "docker-registry",
    "hello-pull",
    `--docker-server=${registry.host}`,
    `--docker-username=${registry.options.username}`,
    `--docker-password=${registry.options.password}`,
  );
  const withSecret = helloPod("hello-secret", image, ids[1], "Always") as { spec: Record<string, unknown> };
  withSecret.spec.imagePullSecrets = [{ name: "hello-pull" }];
  const wrongApplied = performance.now();
  await apply("hello-wrong", helloPod("hello-wrong", image, ids[0], "Always"));
  await apply("hello-secret", withSecret);
  const secretRunning = running("hello-secret");
  secretRunning.catch(() => {});
  // The wrong password: the pull fails, and kubectl describe says why.
  const described = await eventually(
    async () => {
      const text = await kubectl("describe", "pod", "hello-wrong");
      assert(/401 Unauthorized/.test(text), `kubectl describe pod hello-wrong names the registry's refusal:\n${text.split("\n").slice(-12).join("\n")}`);
      return text;
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the pull refused for the wrong password" },
  );
  const reason =
    described
      .split("\n")
      .find((l) => /401 Unauthorized/.test(l))
      ?.trim() ?? "";
  ctx.report(`a wrong password: kubectl describe shows ${JSON.stringify(reason.slice(0, 200))}, ${((performance.now() - wrongApplied) / 1000).toFixed(1)} s after the apply`);
  // The pod's status follows its events: read until it says so too.
  await eventually(
    async () => {
      const state = await podState("hello-wrong");
      assert(/ErrImagePull|ImagePullBackOff/.test(state.waiting), `the pod waits on ErrImagePull or ImagePullBackOff (phase ${state.phase}, waiting ${JSON.stringify(state.waiting)})`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the pod's status showing the failed pull" },
  );
  await secretRunning;
  ctx.report("a pod with its own imagePullSecrets pulled while the cluster's login was wrong");
  // The login made right again: the kubelet's next try pulls; nothing restarted.
  const fixed = performance.now();
  const right = await ctlWithStdin(c, ["cluster", "registry", "login", registry.host, "--username", registry.options.username, "--password-stdin"], `${registry.options.password}\n`);
  assertEqual(right.exitCode, 0, `ctl cluster registry login (${right.stderr.trim()})`);
  const fixedRunning = running("hello-wrong").then(() => (performance.now() - fixed) / 1000);
  fixedRunning.catch(() => {});

  // Mirrors: a host that exists nowhere, its first mirror down, its second the registry.
  const mirrored = MIRRORED_HOST;
  const down = `https://${c.ns.subnet.bridgeAddress}:${registry.options.port + 1}`;
  const mirrorSet = await ctlWithStdin(
    c,
    [
      "cluster",
      "registry",
      "set",
      mirrored,
      "--mirror",
      down,
      "--mirror",
      `https://${registry.host}`,
      "--mirrors-only",
      "--ca",
      registry.caFile,
      "--username",
      registry.options.username,
      "--password-stdin",
    ],
    `${registry.options.password}\n`,
  );
  assertEqual(mirrorSet.exitCode, 0, `ctl cluster registry set ${mirrored} (${mirrorSet.stderr.trim()})`);
  const logFrom = readFileSync(registry.logFile, "utf8").length;
  const failover = performance.now();
  await apply("hello-mirror", helloPod("hello-mirror", `${mirrored}/${HELLO_REPOSITORY}:${HELLO_TAG}`, ids[1], "Always"));
  await running("hello-mirror");
  ctx.report(`${mirrored} with its first mirror down: Running from the second in ${((performance.now() - failover) / 1000).toFixed(1)} s`);
  assert(readFileSync(registry.logFile, "utf8").slice(logFrom).includes(`ns=${mirrored}`), "the registry served the pull as a mirror of the host (containerd's ns parameter)");
  ctx.report(`the login made right → the failing pod Running at the kubelet's next try: ${(await fixedRunning).toFixed(1)} s`);

  // Offline: with the registry stopped, an image no registry holds, imported onto node2, runs there.
  await registry.stop();
  try {
    const offline = "offline.nodecore.test/apps/offline:1";
    const tarball = join(c.dir.path, "offline.oci.tar");
    writeFileSync(tarball, helloImage(readBusybox(HOST_BUSYBOX), offline, "imported, not pulled"));
    const importedAt = performance.now();
    const imported = await f.ctl("image", "import", tarball, "--node", ids[0]!);
    assertEqual(imported.exitCode, 0, `ctl image import (${imported.stderr.trim()})`);
    ctx.report(`ctl image import of a ${(readFileSync(tarball).length / 1024 / 1024).toFixed(1)} MiB bundle onto node2: ${((performance.now() - importedAt) / 1000).toFixed(1)} s`);
    const listedImages = await f.ctl("image", "list", "--node", ids[0]!);
    assert(listedImages.stdout.includes(offline), `ctl image list names the imported image (exit ${listedImages.exitCode}):\n${listedImages.stdout}${listedImages.stderr}`);
    await apply("hello-offline", helloPod("hello-offline", offline, ids[0], "IfNotPresent"));
    const state = await running("hello-offline");
    assertEqual(await podHttpGet(fetcher, state.ip, HELLO_PORT), "imported, not pulled", "the page the imported image serves");
  } finally {
    await registry.restart();
  }
}

/** How many packets of a capture file match a tcpdump filter. */
async function packetsMatching(file: string, filter: string): Promise<number> {
  const read = await runHostCommand(["tcpdump", "-r", file, "-n", filter], { okExitCodes: [0] });
  return read.stdout.split("\n").filter(Boolean).length;
}

/** ctl cluster health --json's failing checks, one line ("" when its output is not that JSON). */
function failingChecks(stdout: string): string {
  try {
    const checks = (JSON.parse(stdout) as { checks: { name: string; ok: boolean; detail: string }[] }).checks;
    return checks
      .filter((c) => !c.ok)
      .map((c) => `${c.name}: ${c.detail}`)
      .join("; ");
  } catch {
    return stdout.trim();
  }
}

e2eTest(
  "Kubernetes: node1's controller serves the owner's kubectl; node2 and node3 as workers are Ready, run a pod each that logs, execs and reaches the other across the encrypted mesh, by IP, by a Service's ClusterIP, by its node port and by name (cluster DNS); an add-on manifest stored before the roles is applied",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const workers = ["node2", "node3"];
    const ids = workers.map((n) => f.ids.get(n)!);
    const roles = (id: string, action: "set" | "unset", role: "kubernetes-controller" | "kubernetes-worker") => setRole(f, id, action, role);
    // An add-on manifest stored while no node holds a Kubernetes role, as an
    // operator prepares a cluster: the controller applies it once it serves.
    const addon = join(c.dir.path, "welcome.yaml");
    writeFileSync(
      addon,
      "apiVersion: v1\nkind: Namespace\nmetadata: {name: welcome}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: hello, namespace: welcome}\ndata: {stored: before-the-roles}\n",
    );
    const stored = await f.ctl("cluster", "manifests", "apply", addon);
    assertEqual(stored.exitCode, 0, `ctl cluster manifests apply (${stored.stderr.trim()})`);
    const started = performance.now();
    // node1 gets back the controller role formation took from it (no apiserver
    // slowed the steps before this one), then the workers get theirs.
    await roles(f.ids.get("node1")!, "set", "kubernetes-controller");
    for (const id of ids) await roles(id, "set", "kubernetes-worker");

    // The owner's kubeconfig, as an operator gets it (it points at node1, the controller again).
    await eventually(
      async () => {
        const written = await f.ctl("kubeconfig", join(c.dir.path, "owner.kubeconfig"));
        assertEqual(written.exitCode, 0, `ctl kubeconfig (${written.stderr.trim()})`);
        assertEqual((await kubectl("get", "--raw", "/readyz")).trim(), "ok", "the apiserver's /readyz");
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the owner's kubectl reaching the apiserver" },
    );
    ctx.report(`kubernetes-controller set on node1 → the owner's kubectl gets /readyz ok: ${((performance.now() - started) / 1000).toFixed(1)} s`);
    await eventually(
      async () => {
        const nodes = (JSON.parse(await kubectl("get", "nodes", "-o", "json")) as { items: NodeObject[] }).items;
        for (const id of ids) {
          const node = nodes.find((n) => n.metadata.name === id);
          assert(node !== undefined, `no Node ${id} yet (have: ${nodes.map((n) => n.metadata.name).join(", ") || "none"})`);
          const ready = node.status.conditions?.find((cond) => cond.type === "Ready");
          assertEqual(ready?.status, "True", `${id} Ready (${ready?.message ?? "no condition yet"})`);
          assert(/^v1\.37\.\d+$/.test(node.status.nodeInfo?.kubeletVersion ?? ""), `${id}'s kubelet reports a real version: ${node.status.nodeInfo?.kubeletVersion}`);
        }
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "both workers Ready" },
    );
    ctx.report(`kubernetes-controller set on node1, kubernetes-worker on node2 and node3 → both Nodes Ready: ${((performance.now() - started) / 1000).toFixed(1)} s`);

    // The owner's one verdict agrees: every check passes, the workers' Nodes read through an apiserver by ctl itself.
    const verdict = await f.ctl("cluster", "health", "--wait", "--wait-timeout", "300", "--json");
    assertEqual(verdict.exitCode, 0, `ctl cluster health --wait: ${failingChecks(verdict.stdout) || verdict.stderr.trim()}`);
    const checks = (JSON.parse(verdict.stdout) as { checks: { name: string; detail: string }[] }).checks;
    // The manifest stored before the roles, applied by the controller (the verdict waited for it too).
    assertEqual(checks.find((c) => c.name === "manifests")?.detail, "1 stored, every one applied", "ctl cluster health's manifests check");
    assertEqual((await kubectl("get", "configmap", "hello", "-n", "welcome", "-o", "jsonpath={.data.stored}")).trim(), "before-the-roles", "the add-on manifest's ConfigMap");
    ctx.report(`an add-on manifest stored before the Kubernetes roles: applied and healthy ${((performance.now() - started) / 1000).toFixed(1)} s after the roles were set`);
    const forgotten = await f.ctl("cluster", "manifests", "delete", "welcome");
    assertEqual(forgotten.exitCode, 0, `ctl cluster manifests delete (${forgotten.stderr.trim()})`);
    assertEqual(checks.find((c) => c.name === "kubernetes")?.detail, "2 workers, every Node Ready", "ctl cluster health's kubernetes check");
    ctx.report(`ctl cluster health: ${checks.map((c) => `${c.name}: ${c.detail}`).join("; ")}`);

    // One pod on each worker, from the preloaded image; nothing is pulled.
    const podsFile = join(c.dir.path, "pods.json");
    const names = workers.map((n) => `marker-${n}`);
    // What each pod serves: a string that must never cross the bridge in clear.
    const pages = names.map((name) => `mesh-secret-${name}-${crypto.randomUUID()}`);
    writeFileSync(podsFile, JSON.stringify({ apiVersion: "v1", kind: "List", items: names.map((name, i) => markerPod(name, ids[i]!, pages[i]!)) }));
    // Pods are refused until the controller-manager has made the default service account, as kubectl would tell an operator.
    await eventually(async () => assertEqual((await kubectl("get", "serviceaccount", "default", "-o", "name")).trim(), "serviceaccount/default", "the default service account"), {
      timeoutMs: STEP_TIMEOUT_MS,
      intervalMs: POLL_MS,
      what: "the default service account",
    });
    // kubectl validates a List against the apiserver's whole OpenAPI v2
    // document; the controller had it built when the apiserver became ready
    // (internal/kubernetes/openapi_warm.ts). Before that, a clean-clone CI
    // run of 2026-11-28 under TCG failed here: building it on this request
    // took longer than the apiserver's 60 s deadline.
    const applied = performance.now();
    await kubectl("apply", "-f", podsFile, "--request-timeout=60s");
    ctx.report(`kubectl apply of a List of two pods (validated against the OpenAPI documents built at the apiserver's start): ${((performance.now() - applied) / 1000).toFixed(1)} s`);
    await eventually(
      async () => {
        for (const name of names) assertEqual((await kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")).trim(), "Running", `pod ${name}'s phase`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "both pods Running" },
    );
    ctx.report(`kubectl apply → a pod Running on each worker: ${((performance.now() - applied) / 1000).toFixed(1)} s`);
    // kubectl logs and exec go apiserver → kubelet (its serving certificate, webhook authorization).
    for (const [i, name] of names.entries()) {
      await eventually(async () => assertEqual((await kubectl("logs", name)).trim(), `marker ${name} on ${ids[i]}`, `${name}'s log`), {
        timeoutMs: STEP_TIMEOUT_MS,
        intervalMs: POLL_MS,
        what: `kubectl logs ${name}`,
      });
    }
    assertEqual((await kubectl("exec", names[0]!, "--", "sh", "-c", "echo exec in $(cat /proc/1/comm)")).trim(), "exec in sleep", "kubectl exec");
    // The container's root, as the pod sees it: an overlay mounted volatile,
    // so that deleting the container does not sync the node's data partition
    // (internal/containerd/config.ts, OVERLAY_MOUNT_OPTIONS).
    // The image links only sh to busybox (image/oci.ts): its other applets run as `busybox <applet>`.
    const mounts = (await kubectl("exec", names[0]!, "--", "busybox", "cat", "/proc/mounts")).split("\n").map((l) => l.split(" "));
    const root = mounts.find((fields) => fields[1] === "/");
    assert(root !== undefined && root[2] === "overlay" && root[3]!.split(",").includes("volatile"), `${names[0]}'s root is an overlay mounted volatile: ${root?.join(" ")}`);

    // The cluster network: each pod has an address in its node's pod prefix
    // (the curator's), and node2's pod reaches node3's by IP through the
    // WireGuard mesh; on the bridge between the two nodes there is WireGuard
    // UDP, no pod address and no page in clear.
    const podIps = [] as string[];
    for (const name of names) podIps.push((await kubectl("get", "pod", name, "-o", "jsonpath={.status.podIP}")).trim());
    const prefixes = podIps.map((ip) => ip.split(".").slice(0, 3).join("."));
    assert(podIps.every((ip) => /^10\.244\.\d+\.\d+$/.test(ip)) && prefixes[0] !== prefixes[1], `pod addresses in two pod prefixes of 10.244.0.0/16: ${podIps.join(", ")}`);
    const [node2, node3] = [c.node("node2"), c.node("node3")];
    const meshCapture = join(c.dir.path, "mesh.pcap");
    const crossed = performance.now();
    const fetched = await capture(c, `host ${node2.address} and host ${node3.address}`, meshCapture, () =>
      eventually(() => podHttpGet(names[0]!, podIps[1]!, POD_HTTP_PORT), {
        timeoutMs: STEP_TIMEOUT_MS,
        intervalMs: POLL_MS,
        what: `node2's pod fetching ${podIps[1]} (node3's pod)`,
      }),
    );
    assertEqual(fetched, pages[1], "the page node3's pod serves, fetched by node2's pod");
    ctx.report(`pod on node2 → pod on node3 by IP, across the mesh: first answer after ${((performance.now() - crossed) / 1000).toFixed(1)} s`);
    const captured = readFileSync(meshCapture);
    assert(!captured.includes(Buffer.from(pages[1]!)), "the page crossed the bridge in clear");
    const wireguard = await packetsMatching(meshCapture, `udp port 51820`);
    const clear = await packetsMatching(meshCapture, "net 10.244.0.0/16");
    assert(wireguard > 0, "no WireGuard packet between node2 and node3 while the pods talked");
    assertEqual(clear, 0, "packets with a pod address in clear on the bridge");
    ctx.report(`the bridge between node2 and node3 while the pods talked: ${wireguard} WireGuard packets, ${clear} with a pod address in clear, the page not in clear`);
    // Services (kube-proxy, nftables): node3's pod behind a NodePort Service,
    // reached by its ClusterIP from node2's pod, and by node2's address and
    // the node port from the host side of the network.
    const serviceFile = join(c.dir.path, "service.json");
    writeFileSync(
      serviceFile,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Service",
        metadata: { name: "marker" },
        spec: { type: "NodePort", selector: { app: names[1] }, ports: [{ port: 80, targetPort: POD_HTTP_PORT }] },
      }),
    );
    const serviceApplied = performance.now();
    await kubectl("apply", "-f", serviceFile);
    const clusterIp = (await kubectl("get", "service", "marker", "-o", "jsonpath={.spec.clusterIP}")).trim();
    const nodePort = Number((await kubectl("get", "service", "marker", "-o", "jsonpath={.spec.ports[0].nodePort}")).trim());
    assert(/^10\.(9[6-9]|10\d|11[01])\.\d+\.\d+$/.test(clusterIp) && nodePort >= 30000, `a ClusterIP in 10.96.0.0/12 and a node port: ${clusterIp}, ${nodePort}`);
    const viaClusterIp = await eventually(() => podHttpGet(names[0]!, clusterIp, 80), {
      timeoutMs: STEP_TIMEOUT_MS,
      intervalMs: POLL_MS,
      what: `node2's pod fetching the Service at ${clusterIp}`,
    });
    assertEqual(viaClusterIp, pages[1], "the page behind the ClusterIP (node3's pod), from node2's pod");
    ctx.report(`Service applied → its ClusterIP answers node2's pod from node3's: ${((performance.now() - serviceApplied) / 1000).toFixed(1)} s`);
    const viaNodePort = await eventually(
      async () => {
        const fetched = await c.exec(["sh", "-c", httpGetCommand(node2.address, nodePort)], { okExitCodes: [0, 1] });
        return httpBody(fetched.stdout, `the node port ${node2.address}:${nodePort} from the host`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: `the node port ${nodePort} on node2 from the host` },
    );
    assertEqual(viaNodePort, pages[1], "the page behind node2's node port (node3's pod), from the host");
    // A pod reaching another worker's own address (its node port) goes
    // through the mesh too: nothing from a pod address crosses in clear.
    const nodeCapture = join(c.dir.path, "pod-to-node.pcap");
    const viaPeerAddress = await capture(c, `host ${node3.address}`, nodeCapture, () => podHttpGet(names[0]!, node3.address, nodePort));
    assertEqual(viaPeerAddress, pages[1], "the page behind node3's node port, from node2's pod");
    const toNodeClear = await packetsMatching(nodeCapture, "net 10.244.0.0/16");
    assert(!readFileSync(nodeCapture).includes(Buffer.from(pages[1]!)), "the page crossed the bridge in clear (pod to node3's address)");
    assertEqual(toNodeClear, 0, "packets with a pod address in clear on the bridge, to or from node3 (pod to node3's address)");
    // The apiserver behind its ClusterIP, from a pod: it runs on node1, which
    // is no worker and so no peer in the mesh; the pod's packets leave node2
    // masqueraded. Go's HTTPS server answers a plain HTTP request with a 400
    // that says so: that answer is the apiserver's own. Five in a row, none retried.
    for (let i = 0; i < 5; i++) {
      const answer = await kubectl("exec", names[0]!, "--", "sh", "-c", httpGetCommand("10.96.0.1", 443));
      assert(/^HTTP\/1\.[01] 400 /.test(answer) && answer.includes("HTTPS server"), `the apiserver at 10.96.0.1:443 from node2's pod (try ${i + 1} of 5): ${JSON.stringify(answer.slice(0, 120))}`);
    }
    ctx.report("node2's pod → the apiserver's ClusterIP (node1, outside the mesh): 5 of 5 answered");
    for (const id of ids) assertEqual((await serviceLine(f, id, "kube-proxy"))?.state, "running", `${id}'s kube-proxy line`);

    // Cluster DNS (each worker's CoreDNS behind kube-dns at 10.96.0.10): from
    // node2's pod, the apiserver's Service, the marker Service, and a
    // headless Service's pod.
    const headlessFile = join(c.dir.path, "headless.json");
    writeFileSync(
      headlessFile,
      JSON.stringify({ apiVersion: "v1", kind: "Service", metadata: { name: "marker-headless" }, spec: { clusterIP: "None", selector: { app: names[1] }, ports: [{ port: POD_HTTP_PORT }] } }),
    );
    await kubectl("apply", "-f", headlessFile);
    const lookup = async (name: string) => {
      const answer = await kubectl("exec", names[0]!, "--", "busybox", "nslookup", name);
      // busybox: "Name:\t<name>\nAddress: <ip>" after the server's own lines.
      return [...answer.matchAll(/^Address:\s+(\d+\.\d+\.\d+\.\d+)$/gm)].map((m) => m[1]!).filter((ip) => ip !== "10.96.0.10");
    };
    const resolved = await eventually(
      async () => {
        const apiserver = await lookup("kubernetes.default.svc.cluster.local");
        const marker = await lookup("marker.default.svc.cluster.local");
        const headless = await lookup("marker-headless.default.svc.cluster.local");
        assertEqual(apiserver.join(","), "10.96.0.1", "kubernetes.default.svc.cluster.local");
        assertEqual(marker.join(","), clusterIp, "marker.default.svc.cluster.local");
        assertEqual(headless.join(","), podIps[1], "marker-headless.default.svc.cluster.local (node3's pod)");
        return { apiserver, marker, headless };
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "names resolved in node2's pod" },
    );
    assert(resolved.marker.length === 1, "one address for the marker Service");
    // A name outside the cluster goes to the node's own resolvers (the
    // network's DNS server, from the DHCP lease): the bridge's host by name.
    const outside = await eventually(() => lookup(GATEWAY_NAME).then((found) => (assertEqual(found.join(","), c.ns.subnet.bridgeAddress, GATEWAY_NAME), found)), {
      timeoutMs: STEP_TIMEOUT_MS,
      intervalMs: POLL_MS,
      what: `${GATEWAY_NAME} resolved in node2's pod through the node's resolver`,
    });
    ctx.report(`a name outside the cluster (${GATEWAY_NAME}) resolved in a pod through the node's DHCP resolver: ${outside.join(",")}`);
    // Once it answers, it keeps answering: five more lookups, none retried.
    for (let i = 0; i < 5; i++) assertEqual((await lookup("kubernetes.default.svc.cluster.local")).join(","), "10.96.0.1", `kubernetes.default.svc.cluster.local again (${i + 1} of 5)`);
    // The Service by its name: the address the cluster DNS gave, then HTTP to
    // it (busybox's nslookup asks the name as given, without the pod's search
    // path, and its nc cannot resolve in a container without /etc).
    const byName = await podHttpGet(names[0]!, resolved.marker[0]!, 80);
    assertEqual(byName, pages[1], "the page behind marker.default.svc.cluster.local, from node2's pod");
    for (const id of ids) assertEqual((await serviceLine(f, id, "cluster-dns"))?.state, "running", `${id}'s cluster-dns line`);

    await eventually(
      async () => {
        const line = await serviceLine(f, ids[0]!, "clusternet");
        assert(new RegExp(`1 peer: ${ids[1]} 10\\.244\\.\\d+\\.0/24 \\(handshake current\\)`).test(line?.message ?? ""), `node2's clusternet line names node3 and its handshake: ${line?.message}`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2's clusternet line" },
    );

    // The Metrics API (internal/kubernetes/metrics_server.ts): `kubectl top`
    // answers for both workers and both pods, through the apiserver's
    // aggregation layer to node1's metrics-server, which verified each
    // kubelet's serving certificate against the Kubernetes CA.
    const topped = performance.now();
    await eventually(
      async () => {
        const top = await kubectl("top", "nodes", "--no-headers");
        for (const id of ids) assert(new RegExp(`^${id}\\s+\\d+m\\s+\\d+%\\s+\\d+Mi\\s+\\d+%`, "m").test(top), `kubectl top nodes names ${id} with its CPU and memory: ${JSON.stringify(top)}`);
        const pods = await kubectl("top", "pods", "--no-headers");
        for (const name of names) assert(new RegExp(`^${name}\\s+\\d+m\\s+\\d+Mi`, "m").test(pods), `kubectl top pods names ${name}: ${JSON.stringify(pods)}`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "kubectl top nodes and pods" },
    );
    const metricsLine = await serviceLine(f, f.ids.get("node1")!, "metrics-server");
    assertEqual(metricsLine?.state, "running", "node1's metrics-server line");
    ctx.report(
      `kubectl top nodes and pods answer for both workers and both pods ${((performance.now() - topped) / 1000).toFixed(1)} s after the DNS checks; node1's metrics-server: ${metricsLine?.message || "started once"}`,
    );

    // The control plane held through all of it: node1's controller-manager and
    // scheduler never lost their leases and restarted (issue 46).
    const listed = await f.ctl("node", "services", "node1", "-o", "json");
    assertEqual(listed.exitCode, 0, `ctl node services node1 (${listed.stderr.trim()})`);
    const controlPlane = (JSON.parse(listed.stdout) as { path: string; restarts: number; lastError?: string }[]).filter((s) => /\.(controller-manager|scheduler)$/.test(s.path));
    assertEqual(controlPlane.length, 2, `node1's controller-manager and scheduler in ctl node services (${controlPlane.map((s) => s.path).join(", ")})`);
    for (const service of controlPlane) assertEqual(service.restarts, 0, `restarts of ${service.path} (last error: ${service.lastError || "none"})`);
    ctx.report(`node1's controller-manager and scheduler: 0 restarts over ${((performance.now() - started) / 60_000).toFixed(1)} minutes of the Kubernetes step`);

    kubernetesWorkers = { ids, names, clusterIp, pages };
  },
  { timeoutMs: KUBERNETES_STEP_TIMEOUT_MS },
);

/** The autoscaling step's deadline: each of its two waits (the HPA reads figures 15 s apart, and pods start under TCG). */
const AUTOSCALING_WAIT_MS = 5 * 60_000;

e2eTest(
  "a HorizontalPodAutoscaler scales a user's CPU burner from 1 to 2 replicas by the Metrics API's figures, and back to 1 once the user ends the load",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    need(kubernetesWorkers, "the Kubernetes workers");
    const figures = await autoscalingStep(
      kubectl,
      (name, body) => {
        const path = join(c.dir.path, name);
        writeFileSync(path, JSON.stringify(body));
        return path;
      },
      AUTOSCALING_WAIT_MS,
    );
    ctx.report(
      `HPA (autoscaling/v2, 50 % CPU target): applied → 2 burner pods Ready ${(figures.scaledUpMs / 1000).toFixed(1)} s (at ${figures.utilizationAtMax ?? "?"} % of requests); load ended → 1 replica ${(figures.scaledDownMs / 1000).toFixed(1)} s`,
    );
  },
  { timeoutMs: 2 * AUTOSCALING_WAIT_MS + 60_000 },
);

/** The NetworkPolicy step's deadline for each change to show (a pod start, under TCG, is the longest). */
const NETWORK_POLICY_WAIT_MS = 3 * 60_000;

e2eTest(
  "NetworkPolicy is enforced on every worker: an ingress policy refuses node3's server to a pod across the mesh and to one on its own bridge, a label lets one in, an egress ipBlock refuses the apiserver's ClusterIP, and deleting the policies lets everyone in again",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const workers = need(kubernetesWorkers, "the Kubernetes workers");
    const figures = await networkPolicyStep(
      {
        kubectl,
        manifest: (name, body) => {
          const path = join(c.dir.path, name);
          writeFileSync(path, JSON.stringify(body));
          return path;
        },
      },
      workers,
      NETWORK_POLICY_WAIT_MS,
    );
    for (const id of workers.ids) assertEqual((await serviceLine(f, id, "network-policy"))?.state, "running", `${id}'s network-policy line`);
    const s = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
    ctx.report(
      `NetworkPolicy (kube-network-policies on each worker): ingress policy applied → both clients refused ${s(figures.deniedMs)}; label → let in ${s(figures.grantedMs)}; egress ipBlock → the apiserver refused ${s(figures.egressMs)}; policies deleted → let in ${s(figures.liftedMs)} (each includes the refused tries' 5 s)`,
    );
  },
  { timeoutMs: 6 * NETWORK_POLICY_WAIT_MS },
);

e2eTest(
  "a user's application from a registry with its own CA and a password: ctl cluster registry set, a two-layer image built here pulled by name onto node2 and then onto node3 from node2 (the peer mirror), a wrong password shown as 401 Unauthorized in kubectl describe until the login is right again (nothing restarted), a mirror taken over when the first is down, and with the registry stopped an offline bundle imported onto node2 runs there",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const registry = need(c.registry, "the launcher's registry");
    const { ids, names } = need(kubernetesWorkers, "the Kubernetes workers");
    await registryStep(ctx, c, f, registry, ids, names[0]!);
  },
  { timeoutMs: REGISTRY_STEP_TIMEOUT_MS },
);

/** The persistent volumes step's deadline: a claim made and bound, a pod restarted, the kubelet's stats (a minute apart), an expansion, a deletion. */
const VOLUMES_STEP_TIMEOUT_MS = 15 * 60_000;

const MiB = 1024 * 1024;

/** The volumes step's claim, left running for the reboot step: its node, its volume, and the node's room for volumes before it. */
let volume: { nodeId: string; volumeName: string; roomBefore: number } | undefined;

/** What node `nodeId` told the scheduler it has for new volumes (its CSIStorageCapacity), in bytes. */
async function volumeRoom(nodeId: string): Promise<number> {
  const capacity = JSON.parse(await kubectl("get", "csistoragecapacity", "-n", "kube-system", `nodecore-local-${nodeId}`, "-o", "json")) as { capacity: string };
  return quantityBytes(capacity.capacity) ?? Number.NaN;
}

async function volumesStep(ctx: E2eContext, c: Cluster, f: FormedCluster, ids: string[]): Promise<void> {
  // node3: a worker that is no etcd voter by now (the consensus step took
  // its role), so the reboot step's reboot of it leaves etcd's quorum alone.
  const nodeId = ids[1]!;
  const exec = (script: string) => kubectl("exec", "db-0", "--", "sh", "-c", script);
  const apply = async (name: string, object: unknown) => {
    const file = join(c.dir.path, `${name}.json`);
    writeFileSync(file, JSON.stringify(object));
    await kubectl("apply", "-f", file, "--request-timeout=60s");
  };
  const running = () =>
    eventually(
      async () => {
        const state = await podState("db-0");
        assertEqual(state.phase, "Running", `pod db-0's phase (waiting: ${state.waiting || "-"})`);
        return state;
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "pod db-0 Running" },
    );
  const roomBefore = await eventually(() => volumeRoom(nodeId), { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node3's CSIStorageCapacity" });

  // A StatefulSet as a user writes one: a claim template of 64 Mi, the default class.
  const claimed = performance.now();
  await apply("db", {
    apiVersion: "apps/v1",
    kind: "StatefulSet",
    metadata: { name: "db" },
    spec: {
      serviceName: "db",
      replicas: 1,
      selector: { matchLabels: { app: "db" } },
      template: {
        metadata: { labels: { app: "db" } },
        spec: {
          nodeSelector: { "kubernetes.io/hostname": nodeId },
          terminationGracePeriodSeconds: 1,
          containers: [{ name: "main", image: TEST_IMAGE_REF, imagePullPolicy: "Never", command: ["sh", "-c", "exec sleep 3600"], volumeMounts: [{ name: "data", mountPath: "/data" }] }],
        },
      },
      volumeClaimTemplates: [{ metadata: { name: "data" }, spec: { accessModes: ["ReadWriteOnce"], resources: { requests: { storage: "64Mi" } } } }],
    },
  });
  await running();
  ctx.report(`claim → pod Running with its volume mounted: ${((performance.now() - claimed) / 1000).toFixed(1)} s`);
  const claim = JSON.parse(await kubectl("get", "pvc", "data-db-0", "-o", "json")) as { spec: { volumeName: string; storageClassName: string }; status: { phase: string } };
  assertEqual(claim.status.phase, "Bound", "the claim's phase");
  assertEqual(claim.spec.storageClassName, "local", "the claim's class (the default)");
  const pv = JSON.parse(await kubectl("get", "pv", claim.spec.volumeName, "-o", "json")) as { spec: { csi: { driver: string }; nodeAffinity: unknown } };
  assertEqual(pv.spec.csi.driver, "volumes.nodecore.local", "the volume's driver");
  assert(JSON.stringify(pv.spec.nodeAffinity).includes(nodeId), `the volume is node3's: ${JSON.stringify(pv.spec.nodeAffinity)}`);

  // The limit holds: 128 Mi do not fit in 64 Mi.
  await exec("echo kept > /data/marker");
  const refused = await exec("dd if=/dev/zero of=/data/big bs=1M count=128 2>&1; echo exit=$?; rm -f /data/big");
  assert(/Disk quota exceeded|No space left/.test(refused) && !/exit=0/.test(refused), `a 128 Mi write into a 64 Mi claim is refused:\n${refused}`);
  ctx.report(
    `128 Mi written into the 64 Mi claim: ${refused
      .split("\n")
      .find((l) => /quota|space/.test(l))
      ?.trim()}`,
  );

  // Its use, as the kubelet reports it (NodeGetVolumeStats).
  const stats = await eventually(
    async () => {
      const metrics = await kubectl("get", "--raw", `/api/v1/nodes/${nodeId}/proxy/metrics`);
      const line = metrics.split("\n").find((l) => l.startsWith("kubelet_volume_stats_capacity_bytes{") && l.includes('persistentvolumeclaim="data-db-0"'));
      assert(line !== undefined, "kubelet_volume_stats_capacity_bytes for data-db-0");
      return line;
    },
    { timeoutMs: 4 * 60_000, intervalMs: 10_000, what: "the kubelet's volume stats" },
  );
  assertEqual(Number(stats.split(" ").at(-1)), 64 * MiB, `the kubelet's capacity of the volume (${stats})`);

  // Grown to 192 Mi while the pod runs: the kubelet raises the limit, and the write fits.
  const expanding = performance.now();
  await kubectl("patch", "pvc", "data-db-0", "--type=merge", "-p", JSON.stringify({ spec: { resources: { requests: { storage: "192Mi" } } } }));
  await eventually(
    async () => {
      const status = JSON.parse(await kubectl("get", "pvc", "data-db-0", "-o", "json")) as { status: { capacity?: { storage?: string } } };
      assertEqual(quantityBytes(status.status.capacity?.storage), 192 * MiB, "the claim's capacity");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the claim grown to 192 Mi" },
  );
  ctx.report(`expansion 64 → 192 Mi seen in the claim's status: ${((performance.now() - expanding) / 1000).toFixed(1)} s`);
  const fits = await exec("dd if=/dev/zero of=/data/big bs=1M count=128 2>&1; echo exit=$?; rm -f /data/big");
  assert(/exit=0/.test(fits), `the 128 Mi write fits after the expansion:\n${fits}`);

  // The pod taken away and back on its data is the reboot step's: its drain
  // evicts db-0 (a deletion, through the Eviction API), and it checks that
  // the StatefulSet's pod runs again on node3 with the marker written above.
  // A deletion here proved the same and cost CI two and a half minutes.

  volume = { nodeId, volumeName: claim.spec.volumeName, roomBefore };
}

e2eTest(
  "a user's StatefulSet keeps its data: a 64 Mi claim of the default class bound on node3, a 128 Mi write refused, the kubelet's volume stats, grown to 192 Mi while running and the write fits",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const { ids } = need(kubernetesWorkers, "the Kubernetes workers");
    await volumesStep(ctx, c, f, ids);
  },
  { timeoutMs: VOLUMES_STEP_TIMEOUT_MS },
);

/** The reboot step's deadline: a worker's reboot under TCG (3-6 min), its pods' return, the claim's deletion. */
const REBOOT_STEP_TIMEOUT_MS = 20 * 60_000;

e2eTest(
  "node3 rebooted as an operator reboots it (ctl node reboot --wait): while it is down node2's pod still reaches the apiserver; back up, its mesh key is the one on its data partition, the Service answers from its pod again, and its StatefulSet's pod runs again on its volume, with its data; the claim deleted gives node3's room back",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const { names, clusterIp, pages } = need(kubernetesWorkers, "the Kubernetes workers");
    const { nodeId, volumeName, roomBefore } = need(volume, "the volumes step's claim");
    const node3 = c.node("node3");
    const exec = (script: string) => kubectl("exec", "db-0", "--", "sh", "-c", script);
    // The one worker reboot of the Kubernetes steps (it costs minutes under
    // TCG): the mesh, the Service and the volume are all checked across it,
    // and the logs step reads what it left.
    const meshKey = /in the cluster network .*key="?([A-Za-z0-9+/=]+)/;
    const keyBefore = meshKey.exec(need(node3.console.find(meshKey), "node3's mesh key on its console").text)![1];
    const startedAt = async () => kubectl("get", "pod", "db-0", "-o", "jsonpath={.status.containerStatuses[0].state.running.startedAt}");
    const dbStartedBefore = await startedAt();

    // A user's application, one replica on each worker, and a user's client
    // asking it at node2's node port throughout node3's reboot. (Applied in
    // the volumes step instead, to start beside it, its pods only slowed that
    // step's own on node3's one vCPU: a CI check of 2026-11-29.)
    const web = join(c.dir.path, "web.json");
    writeFileSync(web, JSON.stringify(webApplication()));
    await kubectl("apply", "-f", web);
    const webPods = async () =>
      (
        JSON.parse(await kubectl("get", "pods", "-l", "app=web", "-o", "json")) as {
          items: { metadata: { name: string; deletionTimestamp?: string }; spec: { nodeName?: string }; status: { conditions?: { type: string; status: string }[] } }[];
        }
      ).items;
    const webPlaced = await eventually(
      async () => {
        const ready = (await webPods()).filter((p) => !p.metadata.deletionTimestamp && p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True"));
        assertEqual(ready.length, 2, `web's ready replicas (${ready.map((p) => `${p.metadata.name} on ${p.spec.nodeName}`).join(", ") || "none"})`);
        return ready;
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "web's two replicas ready" },
    );
    const node3Id = f.ids.get("node3")!;
    const onNode3 = webPlaced.filter((p) => p.spec.nodeName === node3Id).map((p) => `default/${p.metadata.name}`);
    assertEqual(onNode3.length, 1, `one of web's replicas on node3, the other on node2 (${webPlaced.map((p) => `${p.metadata.name} on ${p.spec.nodeName}`).join(", ")})`);
    const webPort = Number((await kubectl("get", "service", "web", "-o", "jsonpath={.spec.ports[0].nodePort}")).trim());
    const node2Address = c.node("node2").address;
    await eventually(async () => httpBody((await c.exec(["sh", "-c", httpGetCommand(node2Address, webPort)], { okExitCodes: [0, 1] })).stdout, "web at node2's node port"), {
      timeoutMs: STEP_TIMEOUT_MS,
      intervalMs: POLL_MS,
      what: "web answering at node2's node port",
    });
    const client = HttpProber.start((argv) => c.commandInNamespace(argv), node2Address, webPort);

    const rebooting = performance.now();
    let downChecked = false;
    const rebooted = rebootAsOperator(c, f, "node3", async () => {
      // A worker gone does not stall the others: node2's pod still gets the
      // apiserver's answer (node1, masqueraded) while node3's VM boots.
      for (let i = 0; i < 3; i++) {
        const answer = await kubectl("exec", names[0]!, "--", "sh", "-c", httpGetCommand("10.96.0.1", 443));
        assert(/^HTTP\/1\.[01] 400 /.test(answer), `the apiserver from node2's pod while node3 reboots (try ${i + 1} of 3): ${JSON.stringify(answer.slice(0, 120))}`);
      }
      downChecked = true;
    });
    // The client is stopped however the reboot ends.
    const answer = await rebooted.catch(async (err: unknown) => {
      await client.stop();
      throw err;
    });
    const served = await client.stop();
    assert(downChecked, "node2's pod was asked while node3 rebooted");
    const upAfter = (performance.now() - rebooting) / 1000;
    // ctl drained node3 first: web's replica and db-0 evicted (their
    // controllers make them again), the bare marker pod left for its kubelet;
    // and it uncordoned node3 once its Node was Ready again.
    const evicted = answer.drained?.evicted ?? [];
    assert(evicted.includes(onNode3[0]!) && evicted.includes("default/db-0"), `ctl node reboot drained web's replica and db-0 from node3: ${JSON.stringify(answer.drained)}`);
    assert(answer.drained?.stayed.some((s) => s.pod === `default/${names[1]}`) === true, `node3's bare marker pod stayed: ${JSON.stringify(answer.drained?.stayed)}`);
    assertEqual(answer.uncordoned, true, "node3 uncordoned by ctl node reboot");
    assertEqual((await kubectl("get", "node", node3Id, "-o", "jsonpath={.spec.unschedulable}")).trim(), "", "node3's Node schedulable after the reboot");
    ctx.report(
      `web (2 replicas, PodDisruptionBudget minAvailable 1) asked every ${PROBE_EVERY_MS} ms at node2's node port through ctl node reboot node3 (drained in ${answer.drained?.seconds} s): ${served.failed} of ${served.total} requests failed, ${served.notAbsorbed} not answered by a retry within ${RETRY_WITHIN_MS / 1000} s; the longest gap between answers ${(served.longestGapMs / 1000).toFixed(1)} s${served.examples.length ? ` (${served.examples.join("; ")})` : ""}`,
    );
    // Waited for: pods left ending on node2 (one vCPU, an etcd voter) slow
    // every step after, and the deletion step counts node2's containers.
    await kubectl("delete", "-f", web, "--wait=true", "--timeout=120s");
    const keyAfter = meshKey.exec((await node3.waitForConsole(meshKey, STEP_TIMEOUT_MS)).text)![1];
    assertEqual(keyAfter, keyBefore, "node3's WireGuard key after its reboot");
    // Traffic through the mesh resumes with no help: the Service's ClusterIP answers node2's pod from node3's pod again.
    const resumed = await eventually(() => podHttpGet(names[0]!, clusterIp, 80), {
      timeoutMs: STEP_TIMEOUT_MS,
      intervalMs: POLL_MS,
      what: "node2's pod reaching node3's pod through the Service after node3's reboot",
    });
    assertEqual(resumed, pages[1], "the page behind the ClusterIP after node3's reboot");
    const serviceBack = (performance.now() - rebooting) / 1000;
    // The kubelet starts the StatefulSet's pod again, on its volume, mounted again, with its data.
    await eventually(
      async () => {
        const now = await startedAt();
        assert(now !== "" && now !== dbStartedBefore, `db-0's container started again after the reboot (started ${now || "not running"}, before ${dbStartedBefore})`);
        assertEqual((await exec("cat /data/marker")).trim(), "kept", "the data after node3's reboot");
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "db-0 running again on its data after node3's reboot" },
    );
    ctx.report(
      `ctl node reboot node3 --wait (a worker with a volume in use, no etcd voter): UP and HEALTHY ${upAfter.toFixed(1)} s; the Service answering from its pod ${serviceBack.toFixed(1)} s; db-0 running on its data ${((performance.now() - rebooting) / 1000).toFixed(1)} s`,
    );

    // The claim deleted with its StatefulSet: the volume and its room go back.
    await kubectl("delete", "statefulset", "db", "--wait=true", "--timeout=300s");
    await kubectl("delete", "pvc", "data-db-0", "--wait=true", "--timeout=300s");
    await eventually(
      async () => {
        const left = await kubectl("get", "pv", "-o", "name");
        assert(!left.includes(volumeName), `the volume's PV is deleted: ${left}`);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the PersistentVolume deleted" },
    );
    const roomAfter = await eventually(
      async () => {
        const room = await volumeRoom(nodeId);
        // Within 32 MiB of before: the node's own files (logs) move meanwhile.
        assert(room >= roomBefore - 32 * MiB, `node3's room back: ${room} bytes, ${roomBefore} before the claim`);
        return room;
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node3's room back" },
    );
    ctx.report(`claim deleted: its PV gone, node3's room for volumes ${(roomBefore / MiB).toFixed(0)} MiB before, ${(roomAfter / MiB).toFixed(0)} MiB after`);
    // Last, so that a failed request does not hide what the checks above would say.
    assertEqual(served.notAbsorbed, 0, `web's failed requests that a retry within ${RETRY_WITHIN_MS / 1000} s would not have absorbed (${served.examples.join("; ")})`);
  },
  { timeoutMs: REBOOT_STEP_TIMEOUT_MS },
);

e2eTest("a deleted pod leaves no container; the worker role taken from node3 removes its Node, its containers and its mesh peer", async () => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const { ids, names } = need(kubernetesWorkers, "the Kubernetes workers");
  const node3 = c.node("node3");
  const roles = (id: string, action: "set" | "unset", role: "kubernetes-controller" | "kubernetes-worker") => setRole(f, id, action, role);
  // The pod on node2 deleted: node2 says no Kubernetes container is left.
  await kubectl("delete", "pod", names[0]!, "--wait=true", "--timeout=300s");
  await eventually(
    async () => {
      const line = await serviceLine(f, ids[0]!, "containerd");
      assert(/; 0 Kubernetes containers \(pods and their sandboxes\)$/.test(line?.message ?? ""), `node2's containerd line: ${line?.message}`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2 without Kubernetes containers" },
  );

  // The worker role taken from node3: its Node goes, and its containers with the runtime.
  const from = node3.console.lines.length;
  await roles(ids[1]!, "unset", "kubernetes-worker");
  const stopped = await node3.waitForConsole(/stopped what the container runtime left running processes=(\d+)/, STEP_TIMEOUT_MS);
  assert(Number(/processes=(\d+)/.exec(stopped.text)![1]) >= 2, `the shims and containers were still there to stop: ${stopped.text}`);
  await eventually(
    async () => {
      const line = await serviceLine(f, ids[1]!, "containerd");
      assertEqual(line?.state, "not-assigned", "node3's containerd line");
      assert(/no container process left \(\/sys\/fs\/cgroup\/nodecore-runtime is empty\)/.test(line!.message), `node3 says no container is left: ${line!.message}`);
      const nodes = (await kubectl("get", "nodes", "-o", "name")).trim().split("\n");
      assertEqual(nodes.join(","), `node/${ids[0]}`, "the Nodes left");
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node3's Node and containers gone" },
  );
  assert(
    node3.console.lines.slice(from).every((l) => !/could not move containerd into the runtime's cgroup/.test(l.text)),
    "containerd ran in the runtime's cgroup",
  );
  // node2's mesh drops node3 as a peer: the records no longer make it a worker.
  await eventually(
    async () => {
      const line = await serviceLine(f, ids[0]!, "clusternet");
      assert(/ 0 peers$/.test(line?.message ?? ""), `node2's clusternet line: ${line?.message}`);
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node3 gone from node2's mesh" },
  );
});

/**
 * `ctl node reboot <name> --wait`, only what an operator does, and what it
 * must have done: the node stopped its services for it, its qemu saw the
 * guest reset (the launcher starts a VM whose guest rebooted again, as a
 * machine's firmware would), and it is back UP and HEALTHY. `whileDown`
 * runs once the node's new VM has started, before ctl returns (the node is
 * booting then, none of its services up). Its logs are read by the logs
 * step (rebootedForLogs).
 */
async function rebootAsOperator(c: Cluster, f: FormedCluster, name: string, whileDown?: () => Promise<void>): Promise<RebootAnswer> {
  const id = f.ids.get(name)!;
  const node = c.node(name);
  const before = { boots: node.boots, console: node.console };
  const asked = performance.now();
  const rebooted = f.ctl("node", "reboot", id, "--wait", "--json");
  if (whileDown) {
    // Whatever whileDown throws is the step's failure; ctl's own end is then nobody's.
    rebooted.catch(() => undefined);
    await eventually(async () => assert(node.boots > before.boots, `${name}'s VM has not started again yet`), { timeoutMs: STEP_TIMEOUT_MS, intervalMs: 1_000, what: `${name}'s reboot` });
    await whileDown();
  }
  const result = await rebooted;
  assertEqual(result.exitCode, 0, `ctl node reboot ${name} --wait (${result.stderr.trim()})`);
  const answer = JSON.parse(result.stdout) as RebootAnswer;
  assertEqual(answer.rebooted, id, "ctl node reboot --wait's answer");
  assertEqual(answer.health, "HEALTHY", `${name}'s health once ctl node reboot --wait returned`);
  assertEqual(node.lastExit?.reason, "guest-reset", `how ${name}'s qemu ended`);
  assertEqual(node.boots, before.boots + 1, `${name}'s boots`);
  assert(
    before.console.lines.some((l) => /stopping the node action=restart why="owner asked through NodeManagement.Reboot"/.test(l.text)),
    `${name} stopped its services for the reboot`,
  );
  rebootedForLogs = { name, seconds: (performance.now() - asked) / 1000 };
  return answer;
}

/** ctl node reboot --wait --json's answer. */
interface RebootAnswer {
  rebooted: string;
  health: string;
  drained?: { evicted: string[]; stayed: { pod: string; why: string }[]; seconds: number };
  uncordoned?: boolean;
}

/** The node the reboot step rebooted as an operator, and how long ctl node reboot --wait took. */
let rebootedForLogs: { name: string; seconds: number } | undefined;

e2eTest("ctl node logs and services read a VM; the node rebooted by ctl node reboot --wait in the reboot step is UP and HEALTHY, and its previous boot's logs say why that boot ended", async (ctx) => {
  const f = need(formed, "the formed cluster");
  const { name, seconds } = need(rebootedForLogs, "the reboot step's reboot");
  const id = f.ids.get(name)!;
  const run = async (...args: string[]) => {
    const result = await f.ctl(...args);
    assertEqual(result.exitCode, 0, `ctl ${args.join(" ")} (${result.stderr.trim()})`);
    return result.stdout;
  };
  // Run again as an operator would, and as ctl says is safe, when a call
  // drops: right after a reboot, under TCG, the curator leader dropped a
  // connection mid-call (two CI runs on 2026-11-26, one each).
  const nodes = await eventually(async () => JSON.parse(await run("node", "list", "--json")) as { id: string; health: string }[], {
    timeoutMs: AFTER_REBOOT_RETRY_MS,
    intervalMs: POLL_MS,
    what: "ctl node list after the reboot",
  });
  assertEqual(nodes.find((n) => n.id === id)?.health, "HEALTHY", `${name}'s health after the reboot`);
  // By its launcher name (the name label), as an operator would type it.
  const services = JSON.parse(await run("node", "services", name, "-o", "json")) as { path: string; state: string }[];
  for (const path of ["root.roleserve.heartbeat", "root.nodemgmt", "root.roleserve.rolefetch"]) {
    assertEqual(services.find((s) => s.path === path)?.state, "healthy", `${path} on ${name}`);
  }
  const status = await run("node", "logs", id, "root.status", "-n", "50");
  assert(/ I root\.status node is UP /.test(status), `${name}'s status log says it is UP:\n${status}`);
  const kernel = await run("node", "logs", id, "kernel", "-n", "5");
  assert(
    kernel.trim().split("\n").length === 5 &&
      kernel
        .split("\n")
        .filter(Boolean)
        .every((l) => / kernel /.test(l)),
    `five kernel messages:\n${kernel}`,
  );
  // What it logged before the reboot, kept on its (encrypted) data partition, and why that boot ended.
  const previous = await eventually(
    async () => {
      const result = await f.ctl("node", "logs", name, "--boot", "-1", "-n", "300");
      assertEqual(result.exitCode, 0, `ctl node logs --boot -1 (${result.stderr.trim()})`);
      return result;
    },
    { timeoutMs: AFTER_REBOOT_RETRY_MS, intervalMs: POLL_MS, what: "ctl node logs --boot -1 after the reboot" },
  );
  assert(/ended \S+Z: reboot: owner asked through NodeManagement\.Reboot$/m.test(previous.stderr), `the previous boot's end is named:\n${previous.stderr}`);
  assert(
    previous.stdout.split("\n").some((l) => / root stopping the node /.test(l)),
    `the previous boot's last lines are there:\n${previous.stdout.split("\n").slice(-5).join("\n")}`,
  );
  ctx.report(`ctl node reboot --wait → ${name} (a worker with a volume in use, no etcd voter) UP and HEALTHY again: ${seconds.toFixed(1)} s`);
});

e2eTest(
  "ctl node reset --wipe on node3 (a member without roles by now): it leaves, is deleted, its data partition keeps no key slot (seen on the host), and it boots into no parameters",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const id3 = f.ids.get("node3")!;
    const node3 = c.node("node3");
    const data = await partitionExtent(node3.files.disk, DATA_PARTITION_NUMBER);
    assertEqual(readLuks2Header(node3.files.disk, data).keyslots, 1, "node3's key slots before the reset");
    // The operator takes back the parameters the hypervisor hands the VM, so
    // that the machine's next boot gets none (the reset cannot erase them).
    rmSync(node3.files.parameters, { force: true });
    const before = { boots: node3.boots, console: node3.console };
    const asked = performance.now();
    const result = await f.ctl("node", "reset", id3, "--wipe");
    assertEqual(result.exitCode, 0, `ctl node reset (${result.stderr.trim()})`);
    assert(result.stderr.includes("the data partition's key slots: destroyed"), `ctl says the key slots went:\n${result.stderr}`);
    await eventually(
      async () => {
        assert(node3.boots > before.boots, "node3 has not rebooted yet");
        await node3.waitForConsole(CONSOLE.fatalBanner, 1_000);
      },
      { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node3 booted again, into no parameters" },
    );
    assert(
      node3.console.lines.some((l) => /no node parameters/.test(l.text)),
      "node3's banner says it has no parameters",
    );
    assert(
      before.console.lines.some((l) => /reset by the owner through NodeManagement\.Reset \(wiped\)/.test(l.text)),
      "node3 said why it rebooted",
    );
    assertEqual(readLuks2Header(node3.files.disk, data).keyslots, 0, "node3's key slots after the reset, read on the host");
    const nodes = JSON.parse((await f.ctl("node", "list", "--json")).stdout) as { id: string }[];
    assert(!nodes.some((n) => n.id === id3), "node3 is no longer listed");
    ctx.report(`ctl node reset --wipe → node3 in no parameters, no key slot left: ${((performance.now() - asked) / 1000).toFixed(1)} s`);
  },
);

e2eTest(
  "etcd's quorum lost for good (node2 unplugged and its disk thrown away): ctl cluster recover from node1 is refused while node2 answers, then makes node1 etcd's only member, writable, with what it had",
  async (ctx) => {
    const c = need(cluster, "the cluster");
    const f = need(formed, "the formed cluster");
    const [id1, id2] = [f.ids.get("node1")!, f.ids.get("node2")!];
    assertEqual((await members("node1")).length, 2, "etcd members before the loss (node1, node2)");
    const written = await f.ctl("node", "label", id1, "e2e-before-loss=kept");
    assertEqual(written.exitCode, 0, `a label written before the loss (${written.stderr.trim()})`);
    const refused = await f.ctl("cluster", "recover", "--from", id1, "--yes");
    assertEqual(refused.exitCode, 1, "recover while node2 answers");
    assert(/etcd still has a quorum/.test(refused.stderr), `the refusal names the quorum:\n${refused.stderr}`);

    const node2 = c.node("node2");
    await node2.stop({ clean: false });
    rmSync(node2.files.disk, { force: true });
    ctx.logger.info("node2 unplugged, its disk thrown away");
    const asked = performance.now();
    const recovered = await f.ctl("cluster", "recover", "--from", id1, "--yes", "--json");
    assertEqual(recovered.exitCode, 0, `ctl cluster recover (${recovered.stderr.trim()})`);
    const said = recovered.stderr.trim().split("\n");
    assert(said[0]?.startsWith(`ctl: survivor: ${id1} `) === true, `the plan comes first:\n${recovered.stderr}`);
    assert(
      said.some((l) => l.includes(`its consensus role dropped: ${id2} `)),
      `the plan names node2:\n${recovered.stderr}`,
    );
    assert(
      said.some((l) => /^ctl: quorum: lost \(/.test(l)),
      `the plan says the quorum is lost:\n${recovered.stderr}`,
    );
    const writableMs = (JSON.parse(recovered.stdout) as { writableAfterMs: number }).writableAfterMs;

    assertEqual((await members("node1")).map((m) => m.name).join(","), id1, "etcd's members after the recovery");
    const listed = JSON.parse((await f.ctl("node", "list", "--json")).stdout) as { id: string; roles: string[]; labels: string[] }[];
    assert(!listed.find((n) => n.id === id2)?.roles.includes("consensus"), "node2's record no longer holds the consensus role");
    assert(listed.find((n) => n.id === id1)!.labels.includes("e2e-before-loss=kept"), "the label written before the loss is there");
    const after = await f.ctl("node", "label", id1, "e2e-after-recovery=written");
    assertEqual(after.exitCode, 0, `a write after the recovery (${after.stderr.trim()})`);
    ctx.report(`ctl cluster recover → writable again (ctl's own measure, TCG): ${(writableMs / 1000).toFixed(1)} s; whole command ${((performance.now() - asked) / 1000).toFixed(1)} s`);
  },
);

e2eCleanup(async () => {
  await cluster?.close();
});
