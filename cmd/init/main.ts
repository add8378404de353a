// The node's PID 1 (and, outside a VM, the same node core as a process).
//
// This file only wires things: the command line, PID 1's start-up (pseudo
// file systems, modules, reaper, the ESP and tmpfs), the supervision tree
// with the node's root runnable, and a clean power-down on request.
// Everything with logic lives in internal/.

import { Etcd3 } from "etcd3";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { FW_CFG_PARAMETERS_PATH, encryptedPartition, plainDirectory } from "../../internal/cluster/mod.ts";
import { dataPartitionDevice, mountESP, mountEphemeral, storageLayout, type StorageLayout } from "../../internal/localstorage/mod.ts";
import { createLogger, type Logger } from "../../internal/log/mod.ts";
import { LogTree, followKernelMessages } from "../../internal/logtree/mod.ts";
import { Network } from "../../internal/network/mod.ts";
import { supervise, type Supervisor } from "../../internal/supervisor/mod.ts";
import { becomeSubreaper } from "../../internal/sys/mod.ts";
import { VERSION } from "../../internal/version/mod.ts";
import { nodeRoot } from "./node.ts";
import { loadKernelModules, mountPseudoFilesystems, powerDown, showFatal, startReaper, watchPowerRequests, type PowerAction } from "./pid1.ts";

const KEEPALIVE_INTERVAL_MS = 1 << 30;
/** How long services get to stop before the node powers down anyway. */
const SHUTDOWN_GRACE_MS = 30_000;

/** Checks that what the binary embeds (etcd's protos, the generated API) loads without node_modules. */
function selfcheck(): void {
  const etcd = new Etcd3({ hosts: "127.0.0.1:1" });
  etcd.close();
  const params = create(NodeParametersSchema, {
    cluster: { case: "clusterBootstrap", value: { ownerPublicKey: new Uint8Array(32) } },
  });
  const decoded = fromBinary(NodeParametersSchema, toBinary(NodeParametersSchema, params));
  if (decoded.cluster.case !== "clusterBootstrap") throw new Error("selfcheck: protobuf round trip failed");
  console.log(`selfcheck ok: etcd client and API messages load (version ${VERSION})`);
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

/** The Kubernetes server binaries' place in the node image. */
const KUBERNETES_BIN_DIR = "/kubernetes/bin";

function runNode(logger: Logger, logs: LogTree, isPid1: boolean, root: string, address: string | undefined): void {
  const layout = storageLayout(root);
  if (isPid1) bootVm(logger, layout, logs);
  else becomeSubreaper();

  // Pending promises do not keep bun's event loop alive, and a runnable may
  // be waiting on nothing but a signal: hold the process open.
  setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
  let stopping = false;
  const start = (): Supervisor =>
    supervise(
      nodeRoot({
        layout,
        parameterPaths: {
          fwCfg: isPid1 ? FW_CFG_PARAMETERS_PATH : `${root}/fw_cfg/parameters.pb`,
          esp: layout.esp.parameters,
          sealed: layout.esp.sealed,
        },
        storage: isPid1 ? encryptedPartition(layout, dataPartitionDevice) : plainDirectory(layout),
        network: isPid1 || !address ? { kind: "dhcp", network: new Network({ hostname: "nodecore" }) } : { kind: "fixed", address },
        etcdClientHost: isPid1 ? "loopback" : "node-address",
        kubernetesBinDir: isPid1 ? KUBERNETES_BIN_DIR : `${root}/kubernetes/bin`,
        onFatal: showFatal,
        logs,
        services: () => supervisor.dump(),
        power: (action, why) => void stop(action === "reboot" ? "restart" : "poweroff", why),
      }),
      { logger },
    );

  const stop = async (action: PowerAction, why: string) => {
    if (stopping) return;
    stopping = true;
    logger.info("stopping the node", { action, why });
    await Promise.race([supervisor.stop(), Bun.sleep(SHUTDOWN_GRACE_MS)]);
    if (!isPid1) {
      // A node running as a process has no machine to restart: it starts
      // its tree again from the same directory, as a rebooted VM would.
      if (action === "restart") {
        logger.info("starting the node again (process mode)");
        supervisor = start();
        stopping = false;
        return;
      }
      process.exit(0);
    }
    try {
      powerDown(action, [layout.data.path, layout.esp.path], logger);
    } catch (err) {
      showFatal(`could not ${action}: ${(err as Error).message}`);
    }
  };
  let supervisor: Supervisor = start();
  if (isPid1) watchPowerRequests((action, why) => void stop(action, why), logger);
  else {
    process.on("SIGTERM", () => void stop("poweroff", "SIGTERM"));
    process.on("SIGINT", () => void stop("poweroff", "SIGINT"));
  }
}

function main(argv: string[]): void {
  if (argv.includes("--version")) {
    console.log(VERSION);
    return;
  }
  if (argv[0] === "selfcheck") {
    selfcheck();
    return;
  }
  const isPid1 = process.pid === 1;
  // Every entry also lands in the node's log rings, for `ctl node logs`.
  const logs = new LogTree();
  const logger = createLogger("root", { sinks: [logs.sink] });
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
  if (!root || (!isPid1 && !address)) {
    console.error("usage: init [--version | selfcheck | --root <dir> --address <ip>]  (as PID 1: no arguments; the root is / and the address comes by DHCP)");
    process.exitCode = 2;
    return;
  }
  try {
    runNode(logger, logs, isPid1, root, address);
  } catch (err) {
    showFatal(`node core could not start: ${(err as Error).message}`);
    if (!isPid1) process.exit(1);
    setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
  }
}

main(process.argv.slice(2));
