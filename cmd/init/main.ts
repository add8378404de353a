// The node's PID 1 (and, outside a VM, the same node core as a process).
//
// This file only wires things: the command line and PID 1's start-up
// (pseudo file systems, modules, reaper, the ESP and tmpfs, and the booted
// slot's system image, verified before anything else runs). Then it loads
// the node core (run_node.ts: the supervision tree with the node's root
// runnable, and a clean power-down on request). Everything with logic lives
// in internal/.
//
// Only what PID 1's start-up needs is imported statically, so that the
// first console line and the mounts do not wait for the rest of the code to
// be evaluated (seconds under emulation; bench/boot.ts prints it). If the
// node core cannot load, PID 1 shows why and stays up.

import { readFileSync } from "node:fs";
import { checkESP, mountESP, mountEphemeral, openSystemImage, readBootSelection, storageLayout, type BootSelection, type StorageLayout } from "../../internal/localstorage/mod.ts";
import { chooseBootSlot, kexecLoader, refuseBootedSlot, settleEarlierTrial } from "../../internal/update/mod.ts";
import { fileLimit, kexecFileLoad, setFileLimit } from "../../internal/sys/mod.ts";
import { FILE_RESERVE, MAX_CONNECTIONS_PER_PROCESS, NODE_FILE_LIMIT } from "../../internal/rpc/mod.ts";
import { createLogger, type Logger } from "../../internal/log/mod.ts";
import { LogTree, followKernelMessages } from "../../internal/logtree/mod.ts";
import { resolve } from "node:path";
import { VERSION } from "../../internal/version/mod.ts";
import { PROCESS_OUTPUT_NAME } from "../../internal/supervisor/mod.ts";
import { KEEPALIVE_INTERVAL_MS, loadKernelModules, mountPseudoFilesystems, powerDown, showFatal, startReaper } from "./pid1.ts";

/** Checks that what the binary embeds (etcd's protos, the generated API, the lazily loaded node code) loads without node_modules. */
async function selfcheck(): Promise<void> {
  // Through the same lazy loader the consensus code uses.
  const { loadEtcd3 } = await import("../../internal/consensus/etcd_client.ts");
  const { Etcd3 } = await loadEtcd3();
  const etcd = new Etcd3({ hosts: "127.0.0.1:1" });
  etcd.close();
  const { create, fromBinary, toBinary } = await import("@bufbuild/protobuf");
  const { NodeParametersSchema } = await import("../../proto/gen/api/configuration_pb.ts");
  const params = create(NodeParametersSchema, {
    cluster: { case: "clusterBootstrap", value: { ownerPublicKey: new Uint8Array(32) } },
  });
  const decoded = fromBinary(NodeParametersSchema, toBinary(NodeParametersSchema, params));
  if (decoded.cluster.case !== "clusterBootstrap") throw new Error("selfcheck: protobuf round trip failed");
  const { runNode } = await import("./run_node.ts");
  if (typeof runNode !== "function") throw new Error("selfcheck: the node code did not load");
  console.log(`selfcheck ok: etcd client, API messages and node code load (version ${VERSION})`);
}

/**
 * PID 1's start-up before the supervision tree, up to the ESP (checked with
 * fsck.fat first: a power cut on FAT leaks clusters) and the ephemeral
 * tmpfs. Failures here are shown, never fatal to the process.
 */
async function bootVm(logger: Logger, layout: StorageLayout, logs: LogTree): Promise<void> {
  const step = async (what: string, fn: () => void | Promise<void>) => {
    try {
      await fn();
    } catch (err) {
      logger.error(`${what} failed`, { error: (err as Error).message });
      showFatal(`${what} failed: ${(err as Error).message}`);
    }
  };
  await step("mounting pseudo file systems", () => mountPseudoFilesystems(logger));
  // Every server's connections together stay below it, with a reserve (internal/rpc listener.ts).
  try {
    setFileLimit(NODE_FILE_LIMIT);
    logger.info("open file limit set", { files: fileLimit().soft, servers: MAX_CONNECTIONS_PER_PROCESS, reserve: FILE_RESERVE });
  } catch (err) {
    logger.warn("could not raise the open file limit: a flood of connections can take the node's own files", { files: fileLimit().soft, error: (err as Error).message });
  }
  followKernelMessages(logs, (message) => logger.warn(message));
  startReaper(logger);
  await step("loading kernel modules", () => loadKernelModules(logger));
  await step("checking the ESP", async () => {
    const check = await checkESP();
    if (check.state === "repaired") logger.warn("the ESP had errors, repaired (fsck.fat)", { said: check.said });
    // Mounting it anyway: if it is no FAT at all, the mount fails and says so next.
    if (check.state === "unrepaired") logger.error("the ESP's check found damage it did not repair, or no FAT file system (fsck.fat)", { said: check.said });
  });
  await step("mounting the ESP", () => logger.info("ESP mounted", { device: mountESP(layout) }));
  await step("mounting the ephemeral tmpfs", () => mountEphemeral(layout));
}

/**
 * Decides the slot this boot runs (internal/update/select.ts): goes on when
 * the running build is the chosen slot's, and otherwise starts the chosen
 * slot's kernel by kexec (this returns only if that fails). Then opens the
 * slot's system image through dm-verity and reads it through, and settles
 * what an earlier update's trial left behind. "refused": this boot must not
 * go on (the node reboots, or shows why it cannot and stays up).
 */
async function verifySystemSlot(logger: Logger, layout: StorageLayout): Promise<BootSelection | "refused"> {
  let cmdline = "";
  try {
    cmdline = readFileSync("/proc/cmdline", "utf8").trim();
  } catch (err) {
    logger.error("could not read the kernel command line", { error: (err as Error).message });
  }
  let selection = readBootSelection(cmdline);
  if (!selection) {
    const started = performance.now();
    const choice = chooseBootSlot(layout, cmdline, kexecLoader(kexecFileLoad));
    if (choice.kind !== "halt" && choice.note) logger.warn(choice.note);
    if (choice.kind === "halt") {
      showFatal(`this node cannot boot: ${choice.why}`);
      return "refused";
    }
    if (choice.kind === "loaded") {
      logger.info(`booting slot ${choice.slot} (version ${choice.version})${choice.trial ? ", once, as a trial" : ""}: its kernel is loaded, starting it`, {
        ms: Math.round(performance.now() - started),
      });
      powerDown("kexec", [layout.esp.path], logger);
      showFatal(`slot ${choice.slot}'s kernel was loaded but would not start`);
      return "refused";
    }
    logger.info(`booting slot ${choice.selection.slot} (version ${choice.version})${choice.selection.trial ? ", once, as a trial" : ""}: the running build`);
    selection = choice.selection;
  } else {
    logger.info(`booted slot ${selection.slot}${selection.trial ? ", once, as a trial" : ""} by kexec`);
  }
  const started = performance.now();
  logger.info("verifying the system image", { slot: selection.slot, ...(selection.trial ? { trial: true } : {}) });
  try {
    await openSystemImage(selection);
    logger.info("system image verified", { slot: selection.slot, ms: Math.round(performance.now() - started) });
  } catch (err) {
    const reason = (err as Error).message;
    logger.error("the booted slot must not run", { slot: selection.slot, error: reason });
    try {
      const refusal = refuseBootedSlot(layout, selection.slot, reason);
      if (refusal.kind === "halt") {
        showFatal(refusal.why);
        return "refused";
      }
      logger.warn(`leaving slot ${selection.slot}: rebooting into slot ${refusal.to} (version ${refusal.version})`);
      powerDown("restart", [layout.esp.path], logger);
    } catch (refuseError) {
      showFatal(`slot ${selection.slot} cannot boot (${reason}), and the node could not switch slots: ${(refuseError as Error).message}`);
    }
    return "refused";
  }
  try {
    const earlier = await settleEarlierTrial(layout, selection.slot);
    if (earlier.settled) logger.warn(`the last update, to slot ${earlier.slot}, did not take: its trial boot ended before it rejoined; this boot is back on slot ${selection.slot}`);
  } catch (err) {
    logger.warn("could not settle the last update's trial", { error: (err as Error).message });
  }
  return selection;
}

/** How many lines of one child process's output the console takes at once, and then per second. */
const CHILD_OUTPUT_BURST = 200;
const CHILD_OUTPUT_PER_SECOND = 2;

async function main(argv: string[]): Promise<void> {
  if (argv.includes("--version")) {
    console.log(VERSION);
    return;
  }
  if (argv[0] === "selfcheck") {
    await selfcheck();
    return;
  }
  // The kubelet runs this binary as its registry credential provider (internal/kubernetes/registries.ts).
  if (argv[0] === "registry-credentials") {
    const { runCredentialProvider } = await import("../../internal/kubernetes/mod.ts");
    process.exitCode = await runCredentialProvider(argv[1]);
    return;
  }
  const isPid1 = process.pid === 1;
  // Every entry also lands in the node's log rings, for `ctl node logs`.
  const logs = new LogTree();
  // The console shows the node's own narrative in full, and of its child
  // processes' output (etcd's slow-request warnings, the apiserver's start)
  // only a bounded share: under software emulation every byte on the serial
  // console costs the guest CPU its services need. The rings keep it all.
  const logger = createLogger("root", {
    sinks: [logs.sink],
    budget: {
      applies: (component) => component.endsWith(`.${PROCESS_OUTPUT_NAME}`),
      burst: CHILD_OUTPUT_BURST,
      perSecond: CHILD_OUTPUT_PER_SECOND,
      readThem: "ctl node logs <node> <component> shows them all",
    },
  });
  // PID 1 must never die: the kernel would panic. Anything that escapes is
  // logged and the node carries on.
  process.on("uncaughtException", (err) => logger.error("uncaught exception", { error: err.message, stack: err.stack }));
  process.on("unhandledRejection", (reason) => logger.error("unhandled rejection", { error: String(reason) }));
  const flag = (name: string) => {
    const index = argv.indexOf(name);
    return index >= 0 ? argv[index + 1] : undefined;
  };
  const root = flag("--root") ?? (isPid1 ? "/" : undefined);
  const address = flag("--address");
  const system = flag("--system");
  if (!root || (!isPid1 && (!address || !system))) {
    console.error(
      "usage: init [--version | selfcheck | --root <dir> --address <ip> --system <dir>]  (as PID 1: no arguments; the root is /, the address comes by DHCP, the system tree is the system image; a node process takes out/system, which bun run build lays out)",
    );
    process.exitCode = 2;
    return;
  }
  const layout = storageLayout(root);
  let selection: BootSelection | undefined;
  if (isPid1) {
    await bootVm(logger, layout, logs);
    const verified = await verifySystemSlot(logger, layout).catch((err: unknown) => {
      showFatal(`verifying the system image failed: ${(err as Error).message}`);
      return "refused" as const;
    });
    if (verified === "refused") {
      setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
      return;
    }
    selection = verified;
  }
  try {
    const started = performance.now();
    const { runNode } = await import("./run_node.ts");
    logger.info("node core loaded", { ms: Math.round(performance.now() - started) });
    runNode({ logger, logs, isPid1, root, layout, address, system: system === undefined ? undefined : resolve(system), selection });
  } catch (err) {
    showFatal(`node core could not start: ${(err as Error).message}`);
    if (!isPid1) process.exit(1);
    setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
  }
}

await main(process.argv.slice(2));
