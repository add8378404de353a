// Package operator: the owner's side of the cluster, behind out/ctl.
//
//   ctl takeownership <addr> ──self-signed owner cert──▶ AAA.Escrow ──▶ owner cert + CA
//        │                              (then: a curator certificate under that CA for <addr>)
//        └──▶ Management.GetClusterInfo ──▶ endpoints ──▶ <config dir>/{owner.crt, ca.crt, endpoints}
//
//   ctl node list | approve | roles, cluster info, ticket
//        └──▶ withFailover(endpoints): mutual TLS as owner; UNAVAILABLE (down or not leader)
//             moves on to the next curator, refusals are final and shown as they are.
//
// Invariants: the owner key never leaves the machine (only a TLS handshake
// proves it); every error names what was tried and what to do next.

export {
  configPaths,
  defaultConfigDir,
  generateOwnerKey,
  loadCredentials,
  readOwnerKey,
  saveCredentials,
  OperatorError,
  CONFIG_DIR_ENV,
  type ConfigPaths,
  type OwnerCredentials,
} from "./config_dir.ts";
export { takeOwnership, withFailover, DEFAULT_CALL_TIMEOUT_MS } from "./connection.ts";
export { nodeTable, rolesOf, summarize, ROLE_FIELDS, type NodeSummary, type RoleName } from "./format.ts";
