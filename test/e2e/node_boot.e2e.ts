// Booting a node under qemu: what its console says, what its disk holds
// afterwards, and how it behaves when its parameters are corrupt.
//
//   node1 (bootstrap parameters)  boot 1: fw_cfg → ESP → DATA formatted (LUKS2 + ext4) → address → UP
//                                  power button → clean poweroff → host reads the disk: ciphertext only
//                                  boot 2: same disk → DATA mounted, not formatted (same marker) → UP
//   node2 (corrupt parameters)     FATAL banner, and the node stays up
//                                  one byte of its system slot changed → the slot is refused before
//                                  anything from it runs, FATAL banner naming it (no other slot yet)
//   node1 again                    ctl node update --image <a version that never rejoins> --activate
//                                  --wait: streamed into slot b, kexec'd as a trial that runs out its
//                                  bound; the node comes back on v1 (slot a, no kexec) by itself, says
//                                  the update failed, and the failed boot's log lines are readable
//                                  a good version installed in slot b, one byte of SYSTEM-B changed while
//                                  powered off: its trial boot refuses it, and the node comes back on slot a
//
// One VM runs at a time. Disks and consoles stay in out/cluster/e2e/.

import { eventually } from "../../internal/testing/mod.ts";
import { fromBinary } from "@bufbuild/protobuf";
import { randomBytes } from "node:crypto";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { bootMilestones, CONSOLE, createCluster, ctlFor, formatMilestones, type Cluster, type ConsoleLine, type NodeVm } from "../launch/mod.ts";
import { flipByte, hasExt4Magic, isLuks2, partitionContains, partitionExtent, readLuks2Header } from "./disk_inspection.ts";
import { SYSTEM_A_PARTITION_NUMBER, SYSTEM_B_PARTITION_NUMBER } from "../../image/layout.ts";
import { AcceleratorError, chooseAccelerator, manifestPaths, readManifest, REPO_ROOT } from "../../image/mod.ts";
import { join } from "node:path";
import { buildUpdateImage, nextVersion } from "./updates.ts";
import { assert, assertEqual, e2eCleanup, e2eTest, type E2eContext } from "./harness.ts";

/** Per boot milestone: TCG is slow, and the host may be busy with other work. */
const MILESTONE_TIMEOUT_MS = 120_000;
/** How long a node with a FATAL banner is watched to show that it stays up. */
const STAYS_UP_OBSERVE_MS = 10_000;
const STAYS_UP_POLL_MS = 1_000;
const DATA_PARTITION_NUMBER = 2;
const CORRUPT_PARAMETERS_BYTES = 64;
/** Where in slot a's system image a byte is changed: inside the squashfs (about 70 MiB), far from its superblock. */
const TAMPERED_OFFSET_BYTES = 20 * 1024 * 1024 + 12345;

let cluster: Cluster | undefined;
/** The node ID node1 reported on its first boot. */
let firstNodeId: string | undefined;

/** The owner's node list (out/ctl inside the namespace) shows this node UP with the consensus role. */
async function assertListedUp(ctl: ReturnType<typeof ctlFor>, nodeId: string | undefined): Promise<void> {
  // Retried as an operator would: right after UP, under TCG, a first
  // connection can miss ctl's 3 s connect timeout (seen once in CI).
  const listed = await eventually(
    async () => {
      const result = await ctl("node", "list", "--json");
      assertEqual(result.exitCode, 0, `ctl node list (${result.stderr.trim()})`);
      return result;
    },
    { timeoutMs: 60_000, intervalMs: 2_000, what: "ctl node list" },
  );
  const nodes = JSON.parse(listed.stdout) as { id: string; state: string; roles: string[] }[];
  const entry = nodes.find((n) => n.id === nodeId);
  assert(entry !== undefined, `ctl node list should show ${nodeId}: ${listed.stdout}`);
  assertEqual(entry.state, "UP", "the node's state in the owner's list");
  assert(entry.roles.includes("consensus"), `the node should hold the consensus role: ${entry.roles.join(",")}`);
}
/** The data partition's format marker as boot 1 reported it. */
let firstFormattedAt: string | undefined;

/** Random bytes that the node's own schema refuses to parse (checked here, so the test cannot pass by luck). */
function corruptParameters(): Uint8Array {
  for (;;) {
    const bytes = new Uint8Array(randomBytes(CORRUPT_PARAMETERS_BYTES));
    try {
      fromBinary(NodeParametersSchema, bytes);
    } catch {
      return bytes;
    }
  }
}

async function theCluster(ctx: E2eContext): Promise<Cluster> {
  cluster ??= await createCluster({
    name: "e2e",
    nodes: [{ parameters: { kind: "bootstrap" } }, { parameters: { kind: "raw", bytes: corruptParameters() } }],
    quiet: !ctx.verbose,
    imageDir: ctx.imageDir,
    logger: ctx.logger.child("launch"),
  });
  return cluster;
}

/** Waits for a console line, saying when it came. */
async function milestone(ctx: E2eContext, node: NodeVm, pattern: RegExp, what: string): Promise<ConsoleLine> {
  const line = await node.waitForConsole(pattern, MILESTONE_TIMEOUT_MS);
  ctx.logger.info(`${node.name}: ${what}`, { after: `${(line.ms / 1000).toFixed(1)}s` });
  return line;
}

/** A logfmt field of a console line (formattedAt=..., source=...). */
function field(line: ConsoleLine, name: string): string | undefined {
  return new RegExp(`\\b${name}=("[^"]*"|\\S+)`).exec(line.text)?.[1]?.replace(/^"|"$/g, "");
}

function reportBoot(ctx: E2eContext, node: NodeVm, title: string): void {
  ctx.report(`${title} (seconds after qemu started, host receive times):\n${formatMilestones(bootMilestones(node.console.lines))}`);
}

/** The FATAL banner's text, unwrapped: the lines between its bars, without the frame. */
function bannerText(lines: readonly ConsoleLine[]): string {
  const start = lines.findIndex((l) => CONSOLE.fatalBanner.test(l.text));
  if (start < 0) return "";
  const body: string[] = [];
  for (const line of lines.slice(start)) {
    if (/^#+$/.test(line.text.trim())) break;
    body.push(line.text.replace(/^# ?/, "").replace(/\s*#$/, "").trim());
  }
  return body.join(" ");
}

function assertNoPanic(node: NodeVm): void {
  const panic = node.console.find(CONSOLE.kernelPanic);
  assert(panic === undefined, `${node.name}'s kernel panicked: ${panic?.text}`);
}

e2eTest("qemu runs the nodes with KVM where a kernel boots under it and with TCG otherwise, saying why; the launcher refuses --accel kvm where KVM cannot run a guest", async (ctx) => {
  const kernel = manifestPaths(readManifest(ctx.imageDir), ctx.imageDir).kernel;
  // run.ts probed before the first step (in CI's fresh clone, for real:
  // there is no out/accel.json yet); this reads that decision, as every
  // launch does (image/accel.ts).
  const probed = await chooseAccelerator({ kernel });
  ctx.report(`accelerator probe on this host: ${probed.accel.toUpperCase()}, ${probed.reason}`);
  assert(probed.reason.length > 0 && !probed.reason.includes("\n"), `the decision should carry a one-line reason: ${JSON.stringify(probed.reason)}`);
  const asked = await chooseAccelerator({ kernel, asked: "kvm" }).then(
    (choice) => choice.accel,
    (error: unknown) => error as Error,
  );
  if (probed.accel === "kvm") {
    assertEqual(asked, "kvm", "--accel kvm where KVM works");
    return;
  }
  assert(asked instanceof AcceleratorError, `--accel kvm should be refused where the probe chose TCG: ${String(asked)}`);
  // As an operator would ask for it: the launcher stops before it sets anything up, in one line naming why.
  const launch = Bun.spawn([process.execPath, join(REPO_ROOT, "test/launch/cluster.ts"), "--no-build", "--image-dir", ctx.imageDir, "--accel", "kvm", "--nodes", "1", "--name", "accel"], {
    stdin: "ignore",
    stdout: "pipe",
    stderr: "pipe",
  });
  const [exitCode, stdout, stderr] = await Promise.all([launch.exited, new Response(launch.stdout).text(), new Response(launch.stderr).text()]);
  assertEqual(exitCode, 1, `the launcher's exit code (${stderr.trim()})`);
  const said = `${stdout}${stderr}`;
  const refusal = said.split("\n").find((l) => l.includes("--accel kvm: KVM cannot run a guest on this host: "));
  assert(refusal !== undefined, `the launcher should say why it cannot use KVM: ${said.slice(-600)}`);
  assert(!/namespace|prepared/.test(said), `nothing should be set up before the refusal: ${said.slice(-600)}`);
});

e2eTest("a node reads its parameters from fw_cfg, mounts its ESP, formats and mounts its encrypted data partition (with project quotas, proven) and gets its address", async (ctx) => {
  const node = (await theCluster(ctx)).node("node1");
  await node.start();
  const parameters = await milestone(ctx, node, CONSOLE.parametersRead, "node parameters read");
  assertEqual(field(parameters, "source"), "fw_cfg", "where the node found its parameters");
  assert(/bootstrap a new cluster/.test(parameters.text), `the parameters should ask to bootstrap, the node said: ${parameters.text}`);
  const esp = await milestone(ctx, node, CONSOLE.espMounted, "ESP mounted");
  assert(/device=\/dev\/vd/.test(esp.text), `the ESP should be mounted from the virtio disk: ${esp.text}`);
  const formatted = await milestone(ctx, node, CONSOLE.dataFormatted, "data partition formatted and mounted");
  firstFormattedAt = field(formatted, "formattedAt");
  assert(firstFormattedAt !== undefined && !Number.isNaN(Date.parse(firstFormattedAt)), `the format marker should be a timestamp: ${formatted.text}`);
  // Persistent volumes' hard limits: the node proved its project quotas before it said it was mounted.
  const quotas = node.console.find(/project quotas/);
  assert(
    quotas !== undefined && /project quotas enforced on the data partition/.test(quotas.text),
    `the node should enforce project quotas on its data partition: ${quotas?.text ?? "it said nothing of them"}`,
  );
  // PID 1's own file limit, above every server's connections together (internal/rpc listener.ts).
  const files = node.console.find(/open file limit/);
  assert(files !== undefined && / I root open file limit set files=65536 /.test(files.text), `PID 1 should raise its open file limit to 65536: ${files?.text ?? "it said nothing of it"}`);
  const address = await milestone(ctx, node, CONSOLE.addressAcquired, "address acquired");
  assert(address.text.includes(`got address ${node.address}/24 `), `node1 should get its static lease ${node.address}: ${address.text}`);
  assertNoPanic(node);
});

e2eTest("the first node bootstraps a cluster and reports itself UP as a consensus member", async (ctx) => {
  const node = (await theCluster(ctx)).node("node1");
  const up = await milestone(ctx, node, CONSOLE.nodeUp, "node is UP");
  const chosen = node.console.find(CONSOLE.slotChosen);
  assert(chosen !== undefined && /booting slot a .*: the running build/.test(chosen.text), `node1 should boot slot a, the disk template's, without a kexec: ${chosen?.text}`);
  assert(node.console.find(CONSOLE.systemVerified) !== undefined, "node1 should verify its system image before it boots on");
  assert(/roles=\S*consensus/.test(up.text), `node1 should hold the consensus role: ${up.text}`);
  assertEqual(field(up, "address"), node.address, "the address the node reports");
  reportBoot(ctx, node, "node1, first boot (formats the data partition, bootstraps the cluster)");
  firstNodeId = field(up, "node");
  // The owner takes ownership with out/ctl and sees the node UP as a consensus member.
  const ctl = ctlFor(await theCluster(ctx));
  const taken = await ctl("takeownership", node.address);
  assertEqual(taken.exitCode, 0, `ctl takeownership (${taken.stderr.trim()})`);
  await assertListedUp(ctl, firstNodeId);
});

e2eTest("the node powers off cleanly on the ACPI power button, unmounting its file systems and leaving only ciphertext in its data partition", async (ctx) => {
  const node = (await theCluster(ctx)).node("node1");
  const started = performance.now();
  const exit = await node.stop({ clean: true });
  ctx.logger.info("node1: powered off", { seconds: ((performance.now() - started) / 1000).toFixed(1) });
  assertEqual(exit.reason, "guest-shutdown", "why qemu exited");
  assertEqual(exit.exitCode, 0, "qemu's exit code");
  assert(node.console.find(CONSOLE.powerButton), "PID 1 should say the power button asked it to stop");
  assert(node.console.find(CONSOLE.poweringOff), "PID 1 should say it is powering off");
  assertNoPanic(node);
  const detached = node.console.find(CONSOLE.unmountFailed);
  assert(detached === undefined, `PID 1 could not unmount a file system at poweroff: ${detached?.text}`);

  const disk = node.files.disk;
  const data = await partitionExtent(disk, DATA_PARTITION_NUMBER);
  assertEqual(data.name, "DATA", `the name of partition ${DATA_PARTITION_NUMBER}`);
  const header = readLuks2Header(disk, data);
  assert(isLuks2(header), `the DATA partition should hold a LUKS2 header, found version ${header.version}`);
  assert(!hasExt4Magic(disk, data.startBytes), "an ext4 superblock shows in plaintext at the start of the DATA partition");
  assert(!hasExt4Magic(disk, data.startBytes + header.segmentOffsetBytes), "an ext4 superblock shows in plaintext where the encrypted payload starts");
  assert(firstFormattedAt !== undefined, "the first boot reported no format marker");
  assert(!partitionContains(disk, data, Buffer.from(firstFormattedAt)), `the format marker ${firstFormattedAt} (a file on /data) shows in plaintext on the disk`);
  ctx.report(`node1's DATA partition: LUKS2 at ${data.startBytes} bytes, ${header.cipher}, payload from +${header.segmentOffsetBytes} bytes; no ext4 magic or marker text in plaintext`);
});

e2eTest("the same disk boots again and mounts its data partition without formatting it, and the node is UP again", async (ctx) => {
  const node = (await theCluster(ctx)).node("node1");
  await node.start();
  await milestone(ctx, node, /found sealed configuration, joining the cluster/, "found its sealed configuration");
  const mounted = await milestone(ctx, node, CONSOLE.dataMounted, "data partition mounted");
  const recovery = node.console.find(CONSOLE.ext4Recovery);
  assert(recovery === undefined, `the data file system was not unmounted cleanly at the last poweroff: ${recovery?.text}`);
  assert(!CONSOLE.dataFormatted.test(mounted.text), `the second boot formatted the data partition again: ${mounted.text}`);
  assertEqual(field(mounted, "formattedAt"), firstFormattedAt, "the format marker on the second boot");
  const up = await milestone(ctx, node, CONSOLE.nodeUp, "node is UP");
  assertEqual(field(up, "node"), firstNodeId, "the node's identity on the second boot");
  await assertListedUp(ctlFor(await theCluster(ctx)), firstNodeId);
  assert(node.console.find(CONSOLE.dataFormatted) === undefined, "the second boot said it formatted the data partition");
  assertNoPanic(node);
  reportBoot(ctx, node, "node1, second boot (same disk: mounts, cold-starts the one-node cluster)");
  const exit = await node.stop({ clean: true });
  assertEqual(exit.reason, "guest-shutdown", "why qemu exited after the second boot");
  const detached = node.console.find(CONSOLE.unmountFailed);
  assert(detached === undefined, `PID 1 could not unmount a file system at the second poweroff: ${detached?.text}`);
});

e2eTest("a node with corrupt parameters shows a FATAL banner naming them and stays up", async (ctx) => {
  const node = (await theCluster(ctx)).node("node2");
  await node.start();
  await milestone(ctx, node, CONSOLE.fatalBanner, "FATAL banner shown");
  // The banner follows the log line; give the rest of it a moment to arrive.
  const banner = await (async () => {
    const deadline = performance.now() + MILESTONE_TIMEOUT_MS;
    for (;;) {
      const text = bannerText(node.console.lines);
      if (/stays up/.test(text) || performance.now() > deadline) return text;
      await Bun.sleep(100);
    }
  })();
  assert(banner.includes("node parameters at fw_cfg"), `the banner should name the fw_cfg parameters: ${banner}`);
  assert(banner.includes("corrupt"), `the banner should say the parameters are corrupt: ${banner}`);

  // Staying up is the absence of an event, so it is watched for a while.
  const until = performance.now() + STAYS_UP_OBSERVE_MS;
  while (performance.now() < until) {
    assertEqual(node.state, "running", "node2's qemu state");
    assertEqual(await node.status(), "running", "node2's QMP status");
    assertNoPanic(node);
    await Bun.sleep(STAYS_UP_POLL_MS);
  }
  ctx.logger.info("node2: still running after the FATAL banner", { watchedSeconds: STAYS_UP_OBSERVE_MS / 1000 });
  await node.kill();
});

e2eTest("a node whose system image was changed by one byte refuses the slot before anything from it runs, and says why", async (ctx) => {
  const node = (await theCluster(ctx)).node("node2");
  const disk = node.files.disk;
  const slot = await partitionExtent(disk, SYSTEM_A_PARTITION_NUMBER);
  assertEqual(slot.name, "SYSTEM-A", `the name of partition ${SYSTEM_A_PARTITION_NUMBER}`);
  // What a failing disk or someone with the powered-off disk could do.
  flipByte(disk, slot.startBytes + TAMPERED_OFFSET_BYTES);
  await node.start();
  await milestone(ctx, node, CONSOLE.slotChosen, "slot a chosen");
  const refused = await milestone(ctx, node, CONSOLE.slotRefused, "refused slot a");
  assert(/fails verification/.test(refused.text), `the refusal should say the image fails verification: ${refused.text}`);
  await milestone(ctx, node, CONSOLE.fatalBanner, "FATAL banner shown");
  const banner = await eventually(
    () => {
      const text = bannerText(node.console.lines);
      assert(/stays up/.test(text), "the banner is still arriving");
      return text;
    },
    { timeoutMs: MILESTONE_TIMEOUT_MS, intervalMs: 100, what: "the whole FATAL banner" },
  );
  assert(banner.includes("slot a") && banner.includes("fails verification"), `the banner should name slot a and its failed verification: ${banner}`);
  assert(banner.includes("slot b holds no system"), `the banner should say there is no other slot to fall back to: ${banner}`);
  // Nothing past the verification ran: the node never read its parameters.
  for (const later of [CONSOLE.systemVerified, CONSOLE.parametersRead, CONSOLE.enrolmentDecided]) {
    const line = node.console.find(later);
    assert(line === undefined, `the refused slot went on to: ${line?.text}`);
  }
  assertNoPanic(node);
  await node.kill();
});

/** Seconds a trial of the broken version has to rejoin before it rolls back: the least a build may set. */
const BROKEN_TRIAL_BOUND_S = 30;

e2eTest("a version that never rejoins, streamed with ctl node update, rolls itself back: node1 comes back on v1, says why, and the failed boot's logs stay readable", async (ctx) => {
  const c = await theCluster(ctx);
  const node = c.node("node1");
  const v1 = readManifest(ctx.imageDir).version;
  const broken = await buildUpdateImage(ctx, { version: nextVersion(v1, 2), name: "broken", testFault: "no-rejoin", trialBoundS: BROKEN_TRIAL_BOUND_S });
  await node.start();
  await milestone(ctx, node, CONSOLE.nodeUp, "node is UP at v1");
  const ctl = ctlFor(c);
  await assertListedUp(ctl, firstNodeId);
  const started = performance.now();
  const updated = await ctl("node", "update", firstNodeId!, "--image", broken.bundle, "--activate", "--wait");
  const seconds = (performance.now() - started) / 1000;
  assertEqual(updated.exitCode, 1, `ctl node update to the broken ${broken.version} should fail (${updated.stdout.trim()} ${updated.stderr.trim()})`);
  assert(updated.stderr.includes(`rolled back to ${v1}`), `ctl should say node1 rolled back to ${v1}: ${updated.stderr.trim()}`);
  // This boot's console: back on slot a, the firmware's own build, with no kexec.
  const chosen = node.console.find(CONSOLE.slotChosen);
  assert(chosen !== undefined && /booting slot a .*: the running build/.test(chosen.text), `node1 should come back on slot a without a kexec: ${chosen?.text}`);
  const described = await ctl("node", "describe", firstNodeId!, "--json");
  assertEqual(described.exitCode, 0, `ctl node describe (${described.stderr.trim()})`);
  const status = JSON.parse(described.stdout) as { version?: string; slot?: string; updateFailure?: { version?: string; reason?: string } };
  assertEqual(status.version, v1, "node1's version after the rollback");
  assertEqual(status.slot, "a", "node1's slot after the rollback");
  assertEqual(status.updateFailure?.version, broken.version, "the failed update's version in node1's status");
  const logs = await eventually(
    async () => {
      const result = await ctl("node", "logs", firstNodeId!, "--boot", "-1");
      assertEqual(result.exitCode, 0, `ctl node logs --boot -1 (${result.stderr.trim()})`);
      return result.stdout;
    },
    { timeoutMs: 60_000, intervalMs: 2_000, what: "the failed boot's logs" },
  );
  assert(logs.includes(`trial of slot b (version ${broken.version})`), `the previous boot's logs should be the broken version's trial:\n${logs.slice(-2000)}`);
  ctx.report(
    `a version that never rejoins (trial bound ${BROKEN_TRIAL_BOUND_S} s): ctl node update --activate --wait, from the update to its rollback, back HEALTHY on ${v1}: ${seconds.toFixed(1)} s (${status.updateFailure?.reason})`,
  );
  // node1 stays up, UP on v1: the next step goes on from here (a boot less under TCG).
});

e2eTest(
  "power lost while slot b is written: node1 boots slot a as before, and the update is simply run again; that good version in slot b, its system image then changed by one byte, is refused when it boots, and node1 comes back on slot a by itself",
  async (ctx) => {
    const c = await theCluster(ctx);
    const node = c.node("node1");
    const v1 = readManifest(ctx.imageDir).version;
    // The same build as the cluster e2e's v2 (same version, same directory): a cache hit when its rolling update ran first (--long).
    const good = await buildUpdateImage(ctx, { version: nextVersion(v1, 1), name: "v2" });
    // Up from the step before, unless that one failed and stopped it.
    if (node.state !== "running") {
      await node.start();
      await milestone(ctx, node, CONSOLE.nodeUp, "node is UP at v1");
    }
    const ctl = ctlFor(c);
    await assertListedUp(ctl, firstNodeId);
    // The power goes while the node writes slot b (copying its system image, then receiving the rest).
    const interrupted = ctl("node", "update", firstNodeId!, "--image", good.bundle);
    await milestone(ctx, node, CONSOLE.updateWriting, "the update writing slot b");
    await node.stop({ clean: false });
    const cut = await interrupted;
    assert(cut.exitCode !== 0, `ctl node update should fail when the node loses power under it: ${cut.stdout.trim()}`);
    await node.start();
    await milestone(ctx, node, CONSOLE.nodeUp, "node is UP after the power cut");
    const afterCut = node.console.find(CONSOLE.slotChosen);
    assert(afterCut !== undefined && /booting slot a .*: the running build/.test(afterCut.text) && !/trial/.test(afterCut.text), `node1 should boot slot a as before, no trial: ${afterCut?.text}`);
    await assertListedUp(ctl, firstNodeId);
    // Run again, installed, not activated: it boots at the next start.
    const installed = await ctl("node", "update", firstNodeId!, "--image", good.bundle);
    assertEqual(installed.exitCode, 0, `ctl node update to ${good.version} (${installed.stderr.trim()})`);
    assert(installed.stdout.includes(`${good.version} is installed in slot b`), `ctl should say ${good.version} is installed in slot b: ${installed.stdout}`);
    await node.stop({ clean: true });
    // What a failing disk, or someone with the powered-off disk, could do.
    const slotB = await partitionExtent(node.files.disk, SYSTEM_B_PARTITION_NUMBER);
    assertEqual(slotB.name, "SYSTEM-B", `the name of partition ${SYSTEM_B_PARTITION_NUMBER}`);
    flipByte(node.files.disk, slotB.startBytes + TAMPERED_OFFSET_BYTES);
    await node.start();
    const boots = node.boots;
    await milestone(ctx, node, /I root booted slot b, once, as a trial by kexec/, "slot b's kernel runs, as a trial");
    const refused = await milestone(ctx, node, CONSOLE.slotRefused, "refused slot b");
    assert(/slot=b/.test(refused.text) && /fails verification/.test(refused.text), `node1 should refuse slot b for failing verification: ${refused.text}`);
    // It reboots by itself, into slot a (the firmware's own build: no kexec).
    await eventually(() => assert(node.boots > boots, "node1 has not rebooted yet"), {
      timeoutMs: MILESTONE_TIMEOUT_MS,
      intervalMs: 500,
      what: "node1's reboot after the refusal",
    });
    await milestone(ctx, node, CONSOLE.nodeUp, "node is UP again");
    const chosen = node.console.find(CONSOLE.slotChosen);
    assert(chosen !== undefined && /booting slot a .*: the running build/.test(chosen.text), `node1 should come back on slot a without a kexec: ${chosen?.text}`);
    const described = await eventually(
      async () => {
        const result = await ctl("node", "describe", firstNodeId!, "--json");
        assertEqual(result.exitCode, 0, `ctl node describe (${result.stderr.trim()})`);
        return JSON.parse(result.stdout) as { version?: string; slot?: string; updateFailure?: { version?: string; reason?: string } };
      },
      { timeoutMs: 60_000, intervalMs: 2_000, what: "ctl node describe after the refusal" },
    );
    assertEqual(described.version, v1, "node1's version after the refusal");
    assertEqual(described.slot, "a", "node1's slot after the refusal");
    assertEqual(described.updateFailure?.version, good.version, "the refused slot's version in node1's status");
    assert(/fails verification/.test(described.updateFailure?.reason ?? ""), `the status should say why slot b was refused: ${described.updateFailure?.reason}`);
    ctx.report(`a tampered slot b refused at its trial boot; node1 back UP on slot a: ${described.updateFailure?.reason}`);
    await node.stop({ clean: true });
  },
);

e2eCleanup(async () => {
  await cluster?.close();
});
