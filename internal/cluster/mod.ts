// Package cluster: how a node becomes, and stays, part of a cluster.
//
//            ┌──────────────── node boots ─────────────────┐
//            ▼                                              │
//   sealed configuration on ESP? ── yes ──▶ JOIN: prove the join key to a
//            │ no                             curator, get the cluster's half
//            ▼                                of the unlock key, open /data
//   node parameters (fw_cfg wins over ESP)
//     ├─ bootstrap ──▶ BOOTSTRAP: new keys, new cluster CA, data key from
//     │                node + cluster halves, start as the first member
//     └─ register ──▶ REGISTER: ticket → NEW, owner approves → STANDBY,
//                     commit → certificate, UP
//
// This package makes that decision and reads what it needs; the flows
// themselves hand over to the role server once the node has credentials and
// storage, so that the first node and every later node run the same code.
//
// Invariants:
//  - A corrupt sealed configuration is an error, never a reason to start
//    over (that would destroy the node's data).
//  - Every missing or bad parameter is reported with what was looked at.

export {
  readNodeParameters,
  validateParameters,
  ParametersError,
  FW_CFG_PARAMETERS_NAME,
  FW_CFG_PARAMETERS_PATH,
  type ParameterPaths,
  type ParametersSource,
  type ValidParameters,
} from "./node_parameters.ts";
export { decideEnrolment, type EnrolmentDecision } from "./enrolment_decision.ts";
export { enrolmentRunnable, type EnrolmentOptions, type EnrolmentState, type ClusterMembership } from "./enrolment.ts";
export { encryptedPartition, plainDirectory, type DataStorage } from "./data_storage.ts";
export { loadCredentials, saveCredentials, CredentialsError, type NodeCredentials } from "./credentials.ts";
export { dataPartitionKey, randomKey, KEY_BYTES } from "./keys.ts";
export { clearPendingBootstrap, loadPendingBootstrap, type PendingBootstrap } from "./flow_bootstrap.ts";
export { clearPendingRestore, loadPendingRestore, type PendingRestore } from "./flow_restore.ts";
export { forgetCluster, zeroAndDelete } from "./reset.ts";
