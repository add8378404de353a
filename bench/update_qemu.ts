// Update figures under qemu (KVM where it works; TCG on this machine): three consensus VMs at
// v1 (out/image), v2 and v3 built from the same tree with `bun run image
// --version` (v3 with --test-fault no-rejoin: it never rejoins, and its
// trial bound is 30 s). Measures:
//  - ctl cluster update v1 → v2, end to end, and each member's share
//    (what its slot a lacks streamed, the rest copied from there, written,
//    kexec'd into slot b, rejoined, HEALTHY);
//  - the bundle alone: ctl node update node3 --image v3, written (what
//    node3's slot b lacks streamed), no reboot;
//  - the time a rollback costs: ctl node reboot node3 --wait, v3's trial
//    boot runs out its bound and the node comes back HEALTHY on v2;
//  - what PID 1 took to load a slot's kernel for kexec, from the consoles.
// Prints figures; asserts nothing. Never run beside another qemu cluster.
//   bun bench/update_qemu.ts [--no-build]

import { join } from "node:path";
import { OUT_DIR, readManifest, REPO_ROOT } from "../image/mod.ts";
import { createLogger } from "../internal/log/mod.ts";
import { eventually } from "../internal/testing/mod.ts";
import { figure, qemuAccel, seconds } from "./figures.ts";
import { createCluster, ensureBuilt, formCluster, runHostCommand } from "../test/launch/mod.ts";
import { nextVersion } from "../test/e2e/updates.ts";
import { benchArgs } from "./args.ts";

const { values } = benchArgs({ "no-build": { type: "boolean", help: "use the image as built" } });

const STEP_TIMEOUT_MS = 600_000;
const POLL_MS = 1_000;
const WIDTH = 72;
const V3_TRIAL_BOUND_S = 30;
const KEXEC_LOADED = /I root booting slot [ab] .*its kernel is loaded.* ms=(\d+)/;

const logger = createLogger("bench");
if (!values["no-build"]) await ensureBuilt(logger);
const imageDir = join(REPO_ROOT, OUT_DIR);
const v1 = readManifest(imageDir).version;

/** Builds the image at `version` beside out/image; returns the bundle directory. */
async function build(name: string, version: string, extra: string[] = []): Promise<string> {
  const outDir = join(REPO_ROOT, "out", `image-bench-${name}`);
  await runHostCommand([process.execPath, join(REPO_ROOT, "image/build.ts"), "--no-install", "--version", version, "--out", outDir, ...extra]);
  return join(outDir, "slot");
}

const v2 = nextVersion(v1, 1, "bench");
const v3 = nextVersion(v1, 2, "bench");
logger.info("building v2 and v3", { v2, v3 });
const v2Bundle = await build("v2", v2);
const v3Bundle = await build("v3", v3, ["--test-fault", "no-rejoin", "--trial-bound", String(V3_TRIAL_BOUND_S)]);

const cluster = await createCluster({ name: "bench-update", nodes: 3, subnetIndex: 8, quiet: true, imageDir, logger: logger.child("launch") });
try {
  const formed = await formCluster(cluster, { timeoutMs: STEP_TIMEOUT_MS, logger: logger.child("formation") });
  await eventually(
    async () => {
      const info = await formed.ctl("cluster", "info", "--json");
      if (info.exitCode !== 0) throw new Error(info.stderr.trim());
      if ((JSON.parse(info.stdout) as { curators: string[] }).curators.length !== cluster.nodes.length) throw new Error("ctl does not know every curator yet");
      const health = await formed.ctl("cluster", "health", "--wait", "--wait-timeout", "600");
      if (health.exitCode !== 0) throw new Error(health.stdout.trim());
    },
    { timeoutMs: STEP_TIMEOUT_MS, intervalMs: POLL_MS, what: "the cluster healthy" },
  );
  console.log(`update figures under qemu (${new Date().toISOString()}, ${navigator.hardwareConcurrency} cores, ${await qemuAccel(imageDir)}), 3 consensus members, ${v1} → ${v2}`);

  let started = performance.now();
  const rolled = await formed.ctl("cluster", "update", "--image", v2Bundle, "--max-unavailable", "1", "--json");
  if (rolled.exitCode !== 0) throw new Error(`ctl cluster update: ${rolled.stderr.trim()}`);
  figure("ctl cluster update, three members one at a time, end to end", seconds(performance.now() - started), WIDTH);
  for (const step of (JSON.parse(rolled.stdout) as { steps: { name: string; seconds?: number }[] }).steps) {
    figure(`  ${step.name}: written, kexec'd, rejoined, HEALTHY`, step.seconds === undefined ? "—" : `${step.seconds.toFixed(1)} s`, WIDTH);
  }
  for (const node of cluster.nodes) {
    const loaded = node.console.lines.map((l) => KEXEC_LOADED.exec(l.text)).find((m) => m !== null);
    if (loaded) figure(`  ${node.name}: slot b's kernel loaded for kexec (PID 1, kexec_file_load)`, seconds(Number(loaded[1])), WIDTH);
  }

  const node3 = formed.ids.get("node3")!;
  started = performance.now();
  const installed = await formed.ctl("node", "update", node3, "--image", v3Bundle);
  if (installed.exitCode !== 0) throw new Error(`ctl node update: ${installed.stderr.trim()}`);
  figure("ctl node update node3 (no --activate): bundle written", seconds(performance.now() - started), WIDTH);

  started = performance.now();
  const rebooted = await formed.ctl("node", "reboot", node3, "--wait");
  if (rebooted.exitCode !== 0) throw new Error(`ctl node reboot: ${rebooted.stderr.trim()}`);
  figure(`rollback: reboot into v3 (never rejoins, bound ${V3_TRIAL_BOUND_S} s) → HEALTHY on v2`, seconds(performance.now() - started), WIDTH);
} finally {
  await cluster.close();
}
