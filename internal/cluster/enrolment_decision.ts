// The first decision a node makes (as in Metropolis's cluster manager):
//
//   sealed configuration on the ESP? ──yes──▶ join      (a member rebooting)
//        │ no
//   node parameters (fw_cfg > ESP)
//        ├─ cluster_bootstrap ──────────────▶ bootstrap (create a new cluster)
//        ├─ cluster_register ───────────────▶ register  (become a new member)
//        └─ cluster_restore ────────────────▶ restore   (create the cluster again from a backup)

import type { SealedConfiguration } from "../../proto/gen/api/configuration_pb.ts";
import type { Logger } from "../log/mod.ts";
import { readSealedConfiguration } from "../localstorage/mod.ts";
import { readNodeParameters, type ParameterPaths, type ParametersSource, type ValidParameters } from "./node_parameters.ts";

export type EnrolmentDecision =
  | { kind: "join"; sealed: SealedConfiguration }
  | (Extract<ValidParameters, { kind: "bootstrap" }> & { source: ParametersSource })
  | (Extract<ValidParameters, { kind: "register" }> & { source: ParametersSource })
  | (Extract<ValidParameters, { kind: "restore" }> & { source: ParametersSource });

export function decideEnrolment(paths: ParameterPaths & { sealed: string }, logger: Logger): EnrolmentDecision {
  const sealed = readSealedConfiguration(paths.sealed);
  if (sealed) {
    logger.info("found sealed configuration, joining the cluster");
    return { kind: "join", sealed };
  }
  const params = readNodeParameters(paths, logger);
  const asks = { bootstrap: "parameters ask to bootstrap a new cluster", register: "parameters ask to register into a cluster", restore: "parameters ask to restore a cluster from a backup" };
  logger.info(asks[params.kind], {
    source: params.source,
  });
  return params;
}
