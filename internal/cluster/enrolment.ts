// The enrolment runnable: decides how this node becomes part of a cluster,
// brings up its data partition, and publishes where it stands.
//
// The cluster flows (bootstrap, register, join) derive the data partition key
// from the node's and the cluster's halves; until they run, a node can be
// given a storage key through qemu fw_cfg (dev.nodecore/storage-test-key).
// That key exists for tests and the launcher only and is logged loudly.

import { existsSync, readFileSync } from "node:fs";
import { Value } from "../event/mod.ts";
import { DATA_MAPPER_NAME, mountDataPartition, type DataMountResult, type StorageLayout } from "../localstorage/mod.ts";
import { untilCancelled, type Runnable } from "../supervisor/mod.ts";
import { decideEnrolment, type EnrolmentDecision } from "./enrolment_decision.ts";
import { ParametersError, type ParameterPaths } from "./node_parameters.ts";

export const FW_CFG_STORAGE_TEST_KEY_NAME = "dev.nodecore/storage-test-key";
export const FW_CFG_STORAGE_TEST_KEY_PATH = `/sys/firmware/qemu_fw_cfg/by_name/${FW_CFG_STORAGE_TEST_KEY_NAME}/raw`;

/** Where this node stands on its way into a cluster. */
export type EnrolmentState =
  | { phase: "deciding" }
  /** Something only an operator can fix (bad parameters); the node stays up to be inspected. */
  | { phase: "fatal"; message: string }
  | { phase: "waiting-for-cluster"; decision: EnrolmentDecision["kind"]; storage: DataMountResult | "locked" };

export interface EnrolmentOptions {
  layout: StorageLayout;
  paths: ParameterPaths & { sealed: string };
  /** The fw_cfg file that may hold a storage test key. */
  storageTestKeyPath: string;
  /** Finds the data partition's block device (throws if there is none). */
  dataDevice: () => string;
  /** Written by enrolment. */
  state: Value<EnrolmentState>;
  /** Shows an operator-facing fatal message (PID 1: a banner on the console). */
  onFatal: (message: string) => void;
}

function readStorageTestKey(path: string): Uint8Array | undefined {
  if (!existsSync(path)) return undefined;
  return new Uint8Array(readFileSync(path));
}

export function enrolmentRunnable(options: EnrolmentOptions): Runnable {
  return async (ctx) => {
    options.state.set({ phase: "deciding" });
    let decision: EnrolmentDecision;
    try {
      decision = decideEnrolment(options.paths, ctx.logger);
    } catch (err) {
      if (!(err instanceof ParametersError)) throw err;
      // Retrying cannot help: the parameters are what they are until an
      // operator fixes them. Say so once, clearly, and stay up.
      ctx.logger.error("cannot enrol: bad node parameters", { error: err.message });
      options.state.set({ phase: "fatal", message: err.message });
      options.onFatal(err.message);
      ctx.signalDone();
      return;
    }

    let storage: DataMountResult | "locked" = "locked";
    const testKey = readStorageTestKey(options.storageTestKeyPath);
    if (testKey) {
      ctx.logger.warn("TEST MODE: data partition key comes from fw_cfg, not from the cluster", { path: options.storageTestKeyPath });
      storage = await mountDataPartition({
        device: options.dataDevice(),
        mountpoint: options.layout.data.path,
        mapperName: DATA_MAPPER_NAME,
        key: testKey,
        formattedMarker: options.layout.data.formatted,
        logger: ctx.logger,
        signal: ctx.signal,
      });
    } else {
      ctx.logger.info("data partition stays locked until the node is part of a cluster");
    }
    options.state.set({ phase: "waiting-for-cluster", decision: decision.kind, storage });
    ctx.logger.info("waiting for cluster", { decision: decision.kind, storage });
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}
