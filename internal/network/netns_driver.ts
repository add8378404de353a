// Test driver, run by network.test.ts inside a network namespace (it
// configures whatever interfaces it finds, so never run it elsewhere).
//
// Runs the network runnable under a supervisor, as the node does, and prints
// one JSON line on stdout per published address ({"address": {...}} or
// {"address": null}) and per death of the runnable ({"error": "..."}). Logs
// go to stderr. It stops the tree and exits 0 on SIGTERM.
//
//   bun netns_driver.ts [--interface NAME] [--second-ms N]

import { parseArgs } from "node:util";
import { createLogger } from "../log/mod.ts";
import { supervise } from "../supervisor/mod.ts";
import { Network, type NetworkOptions } from "./mod.ts";

/** Restart quickly: the test watches deaths, it does not wait for backoff. */
const DRIVER_BACKOFF = { initialMs: 100, multiplier: 1.5, maxMs: 1_000, jitter: 0 };
const KEEPALIVE_INTERVAL_MS = 1 << 30;

const { values } = parseArgs({
  options: { interface: { type: "string" }, "second-ms": { type: "string" } },
});

const print = (line: object) => process.stdout.write(JSON.stringify(line) + "\n");
const logger = createLogger("root", {
  level: "debug",
  sinks: [
    (entry) => {
      if (entry.component === "root.network" && entry.message === "runnable died") print({ error: entry.fields.error });
    },
  ],
});

const options: NetworkOptions = { hostname: "netns-driver" };
if (values.interface !== undefined) options.interfaceName = values.interface;
if (values["second-ms"] !== undefined) options.dhcpTimings = { secondMs: Number(values["second-ms"]) };
const network = new Network(options);

const keepAlive = setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
const supervisor = supervise(
  async (ctx) => {
    ctx.run("network", network.run);
    ctx.signalHealthy();
    using watcher = network.address.watch();
    for (;;) {
      let address;
      try {
        address = await watcher.get({ signal: ctx.signal });
      } catch {
        return; // Only cancellation rejects the get.
      }
      print({ address: address ?? null });
    }
  },
  { logger, backoff: DRIVER_BACKOFF },
);

process.on("SIGTERM", async () => {
  await supervisor.stop();
  clearInterval(keepAlive);
  process.exit(0);
});
