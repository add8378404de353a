// The node's PID 1 (and, outside a VM, the same node core as a process).
//
// This file only wires things: the command line and PID 1's start-up
// (pseudo file systems, modules, reaper, the ESP and tmpfs). Then it loads
// the node core (run_node.ts: the supervision tree with the node's root
// runnable, and a clean power-down on request). Everything with logic lives
// in internal/.
//
// Only what PID 1's start-up needs is imported statically, so that the
// first console line and the mounts do not wait for the rest of the code to
// be evaluated (seconds under emulation; bench/boot.ts prints it). If the
// node core cannot load, PID 1 shows why and stays up.

import { mountESP, mountEphemeral, storageLayout, type StorageLayout } from "../../internal/localstorage/mod.ts";
import { createLogger, type Logger } from "../../internal/log/mod.ts";
import { LogTree, followKernelMessages } from "../../internal/logtree/mod.ts";
import { resolve } from "node:path";
import { VERSION } from "../../internal/version/mod.ts";
import { PROCESS_OUTPUT_NAME } from "../../internal/supervisor/mod.ts";
import { KEEPALIVE_INTERVAL_MS, loadKernelModules, mountPseudoFilesystems, showFatal, startReaper } from "./pid1.ts";

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

/** PID 1's start-up before the supervision tree. Failures here are shown, never fatal to the process. */
function bootVm(logger: Logger, layout: StorageLayout, logs: LogTree): void {
  const step = (what: string, fn: () => void) => {
    try {
      fn();
    } catch (err) {
      logger.error(`${what} failed`, { error: (err as Error).message });
      showFatal(`${what} failed: ${(err as Error).message}`);
    }
  };
  step("mounting pseudo file systems", () => mountPseudoFilesystems(logger));
  followKernelMessages(logs, (message) => logger.warn(message));
  startReaper(logger);
  step("loading kernel modules", () => loadKernelModules(logger));
  step("mounting the ESP", () => logger.info("ESP mounted", { device: mountESP(layout) }));
  step("mounting the ephemeral tmpfs", () => mountEphemeral(layout));
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
  if (isPid1) bootVm(logger, layout, logs);
  try {
    const started = performance.now();
    const { runNode } = await import("./run_node.ts");
    logger.info("node core loaded", { ms: Math.round(performance.now() - started) });
    runNode({ logger, logs, isPid1, root, layout, address, system: system === undefined ? undefined : resolve(system) });
  } catch (err) {
    showFatal(`node core could not start: ${(err as Error).message}`);
    if (!isPid1) process.exit(1);
    setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
  }
}

await main(process.argv.slice(2));
