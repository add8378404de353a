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
//   The command line (cmd/ctl/commands.ts is the table of commands and actions):
//     argv ──cli_parse──▶ command, action, args, flags ──checkInvocation──▶ handler
//            │ cac reads the words; cli_parse checks them against the table,
//            │ quotes flags and values as typed, suggests near words (nearest.ts);
//            │ the handler gets its arguments and flags typed by its own entry,
//            │ defaults filled in (cli_table.ts: tableOf, FlagValues, ArgValues)
//     the table ──cli_help──▶ help;  ──cli_completion──▶ bash and zsh scripts
//
//   What a handler does beyond wiring lives here: the health verdict and its
//   --wait loop (health.ts), node parameters (params.ts), credentials for
//   etcdctl, kubectl and Prometheus (client_credentials.ts, metrics.ts).
//     any error ──explain──▶ "ctl: <cause>", exit 2 (usage) or 1; hints for an
//                            untrusted curator (an earlier cluster's credentials)
//                            and for addresses not routed here (network_hint.ts)
//
// Invariants: the owner key never leaves the machine (only a TLS handshake
// proves it); every error is one line that names its cause (the file, the
// address, the flag as typed) and what to do next; no input prints a stack.

export {
  configPaths,
  defaultConfigDir,
  generateOwnerKey,
  loadCredentials,
  readOwnerKey,
  saveCredentials,
  readPinnedCA,
  readCACertificate,
  OperatorError,
  CONFIG_DIR_ENV,
  type ConfigPaths,
  type OwnerCredentials,
} from "./config_dir.ts";
export { ownerDialCredentials, takeOwnership, withFailover, DEFAULT_CALL_TIMEOUT_MS } from "./connection.ts";
export { describeNode, filterNodes, FilterError, formatDuration, nodeTable, parseLabelArgs, rolesOf, summarize, ROLE_FIELDS, type NodeSummary, type RoleName } from "./format.ts";
export { approveNode, listNodes, nameOf, NAME_LABEL, REBOOT_WAIT_MS, resolveNode, waitUntilRebooted, type Approval, type CallSettings } from "./nodes.ts";
export {
  UsageError,
  argUsage,
  flagUsage,
  positiveInteger,
  wholeNumber,
  usageLine,
  tableOf,
  type ActionSpec,
  type ArgSpec,
  type ArgValues,
  type CommandSpec,
  type FlagSpec,
  type FlagValues,
  type Invocable,
  type Program,
} from "./cli_table.ts";
export { checkInvocation, parseCommandLine, type CheckedInvocation, type Invocation } from "./cli_parse.ts";
export { helpText } from "./cli_help.ts";
export { completionScript, SHELLS, type Shell } from "./cli_completion.ts";
export { explain, curatorFailureLine, type ExitStatus } from "./explain.ts";
export { namespaceHint, isRoutableFromHere } from "./network_hint.ts";
export { checkBackup, describeBackup, describeBackupSchedule, describeRestore, readForRestore, takeBackup, BACKUP_TIMEOUT_MS, type BackupTrust } from "./backup.ts";
export { resetNode, type ResetResult } from "./reset.ts";
export {
  describeDryRun,
  dryRunClusterUpdate,
  updateCluster,
  planClusterUpdate,
  type ClusterUpdateDryRun,
  type ClusterUpdateOptions,
  type ClusterUpdateResult,
  type ClusterUpdateStep,
} from "./cluster_update.ts";
export { kubernetesMinor, kubernetesSkew } from "./kubernetes_skew.ts";
export { readBundle, updateNode, rollbackNode, waitForUpdate, type Bundle, type UpdateOptions, type UpdateResult, type RollbackResult } from "./update.ts";
export { recoverConsensus, describePlan, survivorEndpoint, RECOVER_WAIT_MS, type RecoverResult } from "./recover.ts";
export { defragmentEtcd, etcdStatus, etcdStatusTable, DEFRAG_TIMEOUT_MS, type DefragRow, type EtcdMemberRow } from "./etcd.ts";
export { withNode, withListedNode, readLogs, formatLogEntry, logEntryJson, serviceTable, LOG_LEVELS, type NodeManagementClient, type ServiceRow } from "./node_management.ts";
export { clusterHealth, clusterVerdict, gatherClusterHealth, healthTable, type ClusterHealth, type ClusterHealthInputs, type HealthCheck, type HealthVerdict } from "./health.ts";
export { eventLine, eventRow, readEvents, type EventRow } from "./events.ts";
export { readNodeMetrics, writeMetricsReader, READER_FILES, type WrittenReader } from "./metrics.ts";
export { CORDONED_BY_ANNOTATION, DEFAULT_DRAIN_TIMEOUT_S, drainNode, drainPlan, DrainStopped, EVICTION_RETRY_MS, setUnschedulable, type DrainPlan, type DrainPod, type DrainResult } from "./drain.ts";
export { powerCalls, powerNode, previewDrain, runsKubernetes, waitNodeReady, type PowerAction, type PowerCalls, type PowerOptions, type PowerResult } from "./node_power.ts";
export { ownerKubernetes, statusMessage, type KubernetesAnswer, type OwnerKubernetes } from "./kubernetes_api.ts";
export { certifyNewKey, ETCD_CLIENT_FILES, writeEtcdCredentials, writeOwnerKubeconfig, writePemFiles, type CertifiedKey, type OwnerKubeconfig } from "./client_credentials.ts";
export { bootstrapParameters, registerParameters, restoreParameters, writeParameters } from "./params.ts";
export { manifestFile, manifestFiles, manifestObjects, manifestTable, type ManifestFile } from "./manifests.ts";
export { PASSWORD_ON_COMMAND_LINE, passwordFromStdin, registryCredentials, registryEntry, registryHost, registryTable, type RegistryFlags } from "./registries.ts";
export { checkBundleFile, importOnto, importOntoAll, importTargets, imageTable, IMPORT_CONCURRENCY, IMPORT_TIMEOUT_MS, type ImportResults } from "./images.ts";
