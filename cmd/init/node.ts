// The node's root runnable: what runs under the supervisor once PID 1 has
// its file systems. The tree it builds:
//
//   root
//   ├── network     DHCP on the NIC (VM only) ──▶ Network.address
//   ├── enrolment   parameters ─▶ decision ─▶ data partition ──▶ EnrolmentState
//   └── status      narrates where the node stands on the console

import { Value } from "../../internal/event/mod.ts";
import { enrolmentRunnable, type EnrolmentState, type ParameterPaths } from "../../internal/cluster/mod.ts";
import type { StorageLayout } from "../../internal/localstorage/mod.ts";
import type { Network } from "../../internal/network/mod.ts";
import { untilCancelled, type Runnable } from "../../internal/supervisor/mod.ts";
import { VERSION } from "../../internal/version/mod.ts";

export interface NodeConfig {
  layout: StorageLayout;
  parameterPaths: ParameterPaths & { sealed: string };
  storageTestKeyPath: string;
  /** The NIC's DHCP client; absent when the node runs as a plain process on a host's network. */
  network?: Network;
  dataDevice: () => string;
  onFatal: (message: string) => void;
}

export function nodeRoot(config: NodeConfig): Runnable {
  return async (ctx) => {
    ctx.logger.info("node core started", { version: VERSION, pid: process.pid });
    const enrolment = new Value<EnrolmentState>();
    if (config.network) ctx.run("network", config.network.run);
    ctx.run(
      "enrolment",
      enrolmentRunnable({
        layout: config.layout,
        paths: config.parameterPaths,
        storageTestKeyPath: config.storageTestKeyPath,
        dataDevice: config.dataDevice,
        state: enrolment,
        onFatal: config.onFatal,
      }),
    );
    ctx.run("status", async (status) => {
      const address = config.network ? (await config.network.getAddress({ signal: status.signal })).address : "host network";
      const state = await enrolment.waitFor((s) => s.phase !== "deciding", { signal: status.signal });
      if (state.phase === "waiting-for-cluster") {
        const storage = state.storage === "locked" ? "storage locked" : "storage mounted";
        status.logger.info(`${storage}, address acquired, waiting for cluster`, { address, decision: state.decision });
      }
      status.signalHealthy();
      status.signalDone();
    });
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}
