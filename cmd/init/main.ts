// The node's PID 1 (and, outside a VM, the same node core as a process).
//
// This file only wires things: it handles the command line, starts the
// supervision tree with the node's root runnable, and stops it on a signal.
// Everything with logic lives in internal/.

import { Etcd3 } from "etcd3";
import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { NodeParametersSchema } from "../../proto/gen/api/configuration_pb.ts";
import { createLogger } from "../../internal/log/mod.ts";
import { supervise, untilCancelled, type Runnable } from "../../internal/supervisor/mod.ts";
import { VERSION } from "../../internal/version/mod.ts";

const KEEPALIVE_INTERVAL_MS = 1 << 30;

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

const root: Runnable = async (ctx) => {
  ctx.logger.info("node core started", { version: VERSION, pid: process.pid });
  ctx.signalHealthy();
  await untilCancelled(ctx.signal);
};

async function main(argv: string[]): Promise<void> {
  if (argv.includes("--version")) {
    console.log(VERSION);
    return;
  }
  if (argv[0] === "selfcheck") {
    selfcheck();
    return;
  }
  const logger = createLogger("root");
  // Pending promises do not keep bun's event loop alive, and a runnable may
  // be waiting on nothing but a signal: hold the process open until stopped.
  const keepAlive = setInterval(() => {}, KEEPALIVE_INTERVAL_MS);
  const supervisor = supervise(root, { logger });
  const stop = async (signal: string) => {
    logger.info("stopping", { signal });
    await supervisor.stop();
    clearInterval(keepAlive);
    process.exit(0);
  };
  process.on("SIGTERM", () => void stop("SIGTERM"));
  process.on("SIGINT", () => void stop("SIGINT"));
}

await main(process.argv.slice(2));
