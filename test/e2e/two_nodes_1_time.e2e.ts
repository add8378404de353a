// Time under qemu: machines whose clocks are off (qemu -rtc base=), the
// cluster network's NTP server (chronyd on the bridge, announced by DHCP
// option 42; test/launch/time_server.ts), and the node's chronyd with its
// boot gate (internal/clock):
//
//   node2's clock 3 min behind, the time server out of its reach
//     ─ the boot gate gives up after its timeout; node2 registers anyway
//       (certificates are backdated 5 min) and is reported CLOCK_SKEW;
//       `ctl cluster health` fails its clocks check, naming node2
//   the time server reachable again
//     ─ node2's chronyd steps its clock; CLOCK_SKEW clears; healthy
//   node2 powered off, and on again with its clock 2 h behind
//     ─ the gate syncs it before its first handshake: it joins, its time
//       line says it was corrected by about 2 h, and the audit trail has
//       no CLOCK_SKEW for it since
//   then the restore steps take the cluster over (two_nodes.ts)

import { createCluster, formCluster, type Cluster, type FormedCluster } from "../launch/mod.ts";
import { CONSOLE } from "../launch/mod.ts";
import { eventually } from "../../internal/testing/mod.ts";
import { assert, assertEqual, e2eCleanup, e2eTest } from "./harness.ts";
import { handOver } from "./two_nodes.ts";

const STEP_TIMEOUT_MS = 600_000;
const POLL_MS = 3_000;

let cluster: Cluster | undefined;
let formed: FormedCluster | undefined;
let node2Id = "";

type Listed = { id: string; state: string; health: string; healthReason?: string; clockOffsetMs?: number; services: { name: string; state: string; message: string }[] };

function need<T>(value: T | undefined, what: string): T {
  assert(value !== undefined, `${what} is not there: an earlier step failed`);
  return value;
}

async function listed(f: FormedCluster, id: string): Promise<Listed> {
  const result = await f.ctl("node", "list", "--json");
  assertEqual(result.exitCode, 0, `ctl node list (${result.stderr.trim()})`);
  const node = (JSON.parse(result.stdout) as Listed[]).find((n) => n.id === id);
  assert(node !== undefined, `${id} is listed`);
  return node;
}

const timeLine = (node: Listed) => node.services.find((s) => s.name === "time");

e2eTest("node2's clock 3 min behind and the time server out of its reach: the boot gate gives up, node2 joins and is reported CLOCK_SKEW", async (ctx) => {
  cluster = await createCluster({ name: "e2e-time", nodes: 2, subnetIndex: 11, quiet: !ctx.verbose, imageDir: ctx.imageDir, logger: ctx.logger.child("launch") });
  const c = cluster;
  const node2 = c.node("node2");
  node2.clockOffsetS = -180;
  await need(c.timeServer, "the network's time server").restart({ deny: [node2.address] });
  formed = await formCluster(c, { consensusNodes: 1, kubernetesController: false, timeoutMs: STEP_TIMEOUT_MS, logger: ctx.logger.child("formation") });
  const f = formed;
  node2Id = f.ids.get("node2")!;
  // node1 reached the time server: its gate opened before it bootstrapped.
  assert(
    c.node("node1").console.lines.some((l) => /the clock is synced; enrolling/.test(l.text)),
    "node1's boot gate saw its clock synced",
  );
  assert(
    node2.console.lines.some((l) => /the clock did not sync in time; enrolling anyway/.test(l.text)),
    "node2's boot gate gave up and said so",
  );
  const node1 = await listed(f, f.ids.get("node1")!);
  assert(/^synced to 10\.77\.11\.1 since /.test(timeLine(node1)?.message ?? ""), `node1's time line: ${JSON.stringify(timeLine(node1))}`);

  const skewed = await eventually(
    async () => {
      const node = await listed(f, node2Id);
      assertEqual(node.health, "CLOCK_SKEW", "node2's health");
      return node;
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2 reported CLOCK_SKEW" },
  );
  assert(/behind the curator leader's/.test(skewed.healthReason ?? ""), `the reason says behind: ${skewed.healthReason}`);
  assert((skewed.clockOffsetMs ?? 0) < -150_000, `node2's offset is about -180 s: ${skewed.clockOffsetMs} ms`);
  assert(timeLine(skewed)?.state !== "synced", `node2's time line is not synced: ${JSON.stringify(timeLine(skewed))}`);
  const health = await f.ctl("cluster", "health", "--json");
  assertEqual(health.exitCode, 1, `ctl cluster health's exit code (${health.stderr.trim()})`);
  const clocks = (JSON.parse(health.stdout) as { checks: { name: string; ok: boolean; detail: string }[] }).checks.find((check) => check.name === "clocks");
  assert(clocks !== undefined && !clocks.ok && clocks.detail.includes(node2Id), `the clocks check fails naming node2: ${JSON.stringify(clocks)}`);
});

e2eTest("the time server reachable again: node2's chronyd steps its clock, CLOCK_SKEW clears, and the cluster is healthy", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const reachable = performance.now();
  await need(c.timeServer, "the network's time server").restart({ deny: [] });
  const synced = await eventually(
    async () => {
      const node = await listed(f, node2Id);
      assertEqual(timeLine(node)?.state, "synced", "node2's time line");
      return node;
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "node2's clock synced" },
  );
  const corrected = /corrected by (-?[\d.]+) s/.exec(timeLine(synced)!.message);
  assert(corrected !== null && Math.abs(Math.abs(Number(corrected[1])) - 180) < 30, `node2 was corrected by about 180 s: ${timeLine(synced)!.message}`);
  const health = await f.ctl("cluster", "health", "--wait", "--wait-timeout", "300");
  assertEqual(health.exitCode, 0, `ctl cluster health --wait once synced (${health.stdout.trim()} ${health.stderr.trim()})`);
  assertEqual((await listed(f, node2Id)).health, "HEALTHY", "node2's health");
  // The leader writes a change of health into the audit trail when it next
  // looks (every few seconds): wait for the clearing to be there, so that the
  // next step's "since it powered on" cannot catch this step's record late.
  await eventually(
    async () => {
      const events = await healthEvents(f);
      assert(
        events.some((e) => e.detail.startsWith("CLOCK_SKEW → HEALTHY")),
        `the trail records CLOCK_SKEW → HEALTHY for node2: ${JSON.stringify(events.slice(-5).map((e) => e.detail))}`,
      );
    },
    { timeoutMs: 60_000, intervalMs: POLL_MS, what: "the audit trail recorded node2's CLOCK_SKEW clearing" },
  );
  ctx.report(`time server reachable → node2 synced and the cluster healthy (TCG): ${((performance.now() - reachable) / 1000).toFixed(1)} s`);
});

e2eTest("node2 powered on with its clock 2 h behind: the boot gate syncs it before it joins, and it is never reported CLOCK_SKEW", async (ctx) => {
  const c = need(cluster, "the cluster");
  const f = need(formed, "the formed cluster");
  const node2 = c.node("node2");
  const off = await f.ctl("node", "poweroff", node2Id);
  assertEqual(off.exitCode, 0, `ctl node poweroff (${off.stderr.trim()})`);
  await node2.exited();
  node2.clockOffsetS = -7200;
  const poweredOn = Date.now();
  const booted = performance.now();
  await node2.start();
  await node2.waitForConsole(/the clock is synced; enrolling/, STEP_TIMEOUT_MS, { milestone: "the boot gate to open" });
  await node2.waitForConsole(CONSOLE.nodeUp, STEP_TIMEOUT_MS);
  const health = await f.ctl("cluster", "health", "--wait", "--wait-timeout", "300");
  assertEqual(health.exitCode, 0, `ctl cluster health --wait (${health.stdout.trim()} ${health.stderr.trim()})`);
  ctx.report(`power-on with the clock 2 h behind → synced, UP, cluster healthy (TCG): ${((performance.now() - booted) / 1000).toFixed(1)} s`);
  const node = await listed(f, node2Id);
  const corrected = /corrected by (-?[\d.]+) s/.exec(timeLine(node)?.message ?? "");
  assert(corrected !== null && Math.abs(Math.abs(Number(corrected[1])) - 7200) < 60, `node2 was corrected by about 2 h: ${JSON.stringify(timeLine(node))}`);
  // The leader's record of node2's health since it powered on: no CLOCK_SKEW.
  // A change of health reads "FROM → TO[: reason]"; what counts is a change into CLOCK_SKEW.
  const since = (await healthEvents(f)).filter((e) => Date.parse(e.time) >= poweredOn);
  assert(!since.some((e) => / → CLOCK_SKEW\b/.test(e.detail)), `no change into CLOCK_SKEW for node2 since it powered on: ${JSON.stringify(since.map((e) => e.detail))}`);
  lastStepPassed = true;
});

/** Set by the last step: only a cluster every step left as it should be is handed over. */
let lastStepPassed = false;

/** node2's records in the audit trail, as ctl events --json prints them. */
async function healthEvents(f: FormedCluster): Promise<{ time: string; detail: string }[]> {
  const out = await f.ctl("events", "--node", node2Id, "-n", "1000", "--json");
  assertEqual(out.exitCode, 0, `ctl events (${out.stderr.trim()})`);
  return out.stdout
    .trim()
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l) as { time: string; detail: string });
}

// The restore steps take the cluster over when they run next (two_nodes.ts).
e2eCleanup(() => handOver(cluster, formed, lastStepPassed));
