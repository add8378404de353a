// ctl's commands: one table, from which its parsing (cac reads the words),
// help, "unknown action" errors, shell completion and the handlers' types
// are all generated (internal/operator/cli_*.ts). Adding an action is one
// entry in its command's `actions`: action({ name, arguments, flags, one
// line of description, handler }); the handler gets its arguments and flags
// typed by that entry (a flag's default is written once, in its spec). The
// handlers only wire flags to internal/operator and print the result.

import { describeColdStart, MAX_UNLOCK_SHARE_THRESHOLD } from "../../internal/coldstart/mod.ts";
import { shownTarget, targetUrlProblem } from "../../internal/backup/mod.ts";
import { readFileSync } from "node:fs";
import { X509Certificate } from "node:crypto";
import { Management } from "../../proto/gen/api/management_pb.ts";
import {
  LOG_LEVELS,
  ROLE_FIELDS,
  SHELLS,
  formatLogEntry,
  logEntryJson,
  parseLabelArgs,
  OperatorError,
  UsageError,
  serviceTable,
  withListedNode,
  withNode,
  readLogs,
  approveNode,
  completionScript,
  generateOwnerKey,
  listNodes,
  DEFAULT_DRAIN_TIMEOUT_S,
  powerCalls,
  powerNode,
  runsKubernetes,
  type PowerAction,
  type PowerResult,
  drainNode,
  ownerKubernetes,
  setUnschedulable,
  nodeTable,
  describeNode,
  positiveInteger,
  readOwnerKey,
  readPinnedCA,
  readCACertificate,
  type BackupTrust,
  saveCredentials,
  takeOwnership,
  withFailover,
  etcdStatus,
  etcdStatusTable,
  takeBackup,
  checkBackup,
  describeBackup,
  describeRestore,
  describeBackupSchedule,
  readForRestore,
  wholeNumber,
  defragmentEtcd,
  recoverConsensus,
  resetNode,
  readBundle,
  updateNode,
  rollbackNode,
  updateCluster,
  dryRunClusterUpdate,
  describeDryRun,
  DEFAULT_CALL_TIMEOUT_MS,
  tableOf,
  type ArgSpec,
  type CallSettings,
  type ConfigPaths,
  type FlagSpec,
  type FlagValues,
  type OwnerCredentials,
  type Program,
  type RoleName,
  helpText,
  parseCommandLine,
  NAME_LABEL,
  clusterVerdict,
  healthTable,
  eventLine,
  eventRow,
  filterNodes,
  FilterError,
  readEvents,
  readNodeMetrics,
  writeMetricsReader,
  PASSWORD_ON_COMMAND_LINE,
  checkBundleFile,
  importOntoAll,
  importTargets,
  imageTable,
  manifestFiles,
  manifestTable,
  registryCredentials,
  registryEntry,
  registryHost,
  registryTable,
  type RegistryFlags,
  writeEtcdCredentials,
  writeOwnerKubeconfig,
  bootstrapParameters,
  registerParameters,
  restoreParameters,
  writeParameters,
} from "../../internal/operator/mod.ts";
import { endpointsOfDirectory, formatEndpoint, type CuratorClientOf } from "../../internal/curator/client/mod.ts";
import { rawPublicKey } from "../../internal/pki/mod.ts";
import { VERSION } from "../../internal/version/mod.ts";
import { timeServersProblem } from "../../internal/clock/mod.ts";

/** What every handler gets: the program's flags, resolved, and ways to reach the cluster and print. */
export interface Ctl {
  json: boolean;
  /** --owner-key, if given. */
  ownerKey: string | undefined;
  /** The config dir's files (--config, $NODECORE_CONFIG, ~/.config/nodecore). */
  paths(): ConfigPaths;
  /** The owner's credentials from the config dir, checked (internal/operator/config_dir.ts). */
  credentials(): OwnerCredentials;
  /** The per-call deadline (--timeout) and where progress goes. */
  settings: CallSettings;
  /** Prints `value` as JSON with --json, `human` otherwise. */
  print(value: unknown, human: string): void;
  /** Prints one line as it is (for streams of entries). */
  printLine(line: string): void;
  /** Tells the owner what ctl is doing (a line that the next replaces, on a terminal only). */
  progress(line: string): void;
  /** Tells the owner something that happened meanwhile, as a line of its own on stderr ("ctl: ..."). */
  note(line: string): void;
  /** The whole ID of the node the owner typed: a whole ID as it is, a unique prefix, or a name label (operator resolveNode). */
  node(typed: string): Promise<string>;
}

const { action, command } = tableOf<Ctl>();

/** The flags every command and action takes (main.ts reads them). */
export const FLAGS = [
  { name: "config", value: "dir", description: "Where the owner's credentials live", shownDefault: "$NODECORE_CONFIG or ~/.config/nodecore", complete: "dir" },
  { name: "owner-key", value: "file", description: "The owner's Ed25519 private key", shownDefault: "<config>/owner.key", complete: "file" },
  { name: "timeout", value: "ms", description: "Deadline of each call, in milliseconds", default: DEFAULT_CALL_TIMEOUT_MS, parse: positiveInteger("milliseconds") },
  { name: "json", description: "Print JSON instead of text" },
  { name: "output", short: "o", value: "format", description: "json (the same as --json) or text", choices: ["json", "text"] },
  { name: "help", short: "h", description: "Show what ctl, a command or an action takes" },
  { name: "version", description: "Print the version" },
] as const satisfies readonly FlagSpec[];

/** A node: its ID, a unique prefix of it, or its name label (each command resolves it with ctl.node). */
const NODE_ID = { name: "node id", complete: "node" } as const satisfies ArgSpec;
const DRAIN_TIMEOUT_FLAG = {
  name: "drain-timeout",
  value: "seconds",
  description: "How long the drain may take (evictions a budget refuses are asked again until then)",
  default: DEFAULT_DRAIN_TIMEOUT_S,
  parse: positiveInteger("seconds", 24 * 3600),
} as const;
/** A reboot's and a power-off's drain (internal/operator/node_power.ts). */
const POWER_DRAIN_FLAGS = [
  DRAIN_TIMEOUT_FLAG,
  { name: "no-drain", description: "Do not drain a worker first: its pods stop with it, without their PodDisruptionBudgets being asked" },
  { name: "force", description: "Also evict bare pods (no controller would make them again): gone for good; without it they stay and run again when the node is back" },
] as const;

async function powerNodeFromCtl(ctl: Ctl, typed: string, action: PowerAction, options: { wait: boolean; noDrain: boolean; drainTimeoutS: number; force: boolean }): Promise<PowerResult> {
  const id = await ctl.node(typed);
  const credentials = ctl.credentials();
  const nodes = await listNodes(credentials, ctl.settings);
  const node = nodes.find((n) => n.id === id);
  if (!node) throw new OperatorError(`${id} is no longer in the cluster`);
  const kubernetesRuns = runsKubernetes(nodes);
  return powerNode(
    powerCalls(credentials, ctl.settings),
    node,
    action,
    { drain: !options.noDrain, drainTimeoutMs: options.drainTimeoutS * 1000, force: options.force, wait: options.wait, kubernetesRuns },
    { note: ctl.note, progress: ctl.progress },
  );
}

/** What a drain around a power action did, for --json. */
const powerJson = (result: PowerResult) => ({ ...(result.drained ? { drained: result.drained } : {}), ...(result.uncordoned !== undefined ? { uncordoned: result.uncordoned } : {}) });

const FILE = { name: "file", complete: "file" } as const satisfies ArgSpec;
const ROLE_NAMES = Object.keys(ROLE_FIELDS) as RoleName[];

/** --time-server: the NTP servers a new node syncs with (besides its DHCP lease's). */
const TIME_SERVER_FLAG = {
  name: "time-server",
  value: "list",
  description: "NTP servers the node syncs its clock with, comma-separated IP addresses or host names (besides those its DHCP lease names)",
  parse: timeServerList,
} as const satisfies FlagSpec;

function timeServerList(text: string): string[] {
  const servers = text
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  const problem = timeServersProblem(servers);
  if (problem) throw new UsageError(problem);
  return servers;
}

/** Which CA a backup is checked against: --ca, else the config directory's ca.crt. */
const CA_FLAG = { name: "ca", value: "file", description: "The cluster CA certificate (PEM) the backup must be signed by", shownDefault: "ca.crt in the config directory" } as const satisfies FlagSpec;
const ALLOW_UNSIGNED_FLAG = {
  name: "allow-unsigned",
  description: "Accept a backup written before backups were signed (format 1): only its header then says which cluster it is of",
} as const satisfies FlagSpec;

function backupTrust(ctl: Ctl, flags: FlagValues<[typeof CA_FLAG, typeof ALLOW_UNSIGNED_FLAG]>): BackupTrust {
  const ca = flags.ca !== undefined ? readCACertificate(flags.ca) : readPinnedCA(ctl.paths());
  return { ...(ca ? { ca } : {}), allowUnsigned: flags["allow-unsigned"] };
}

/** Restore parameters from a backup: `ctl params restore`, and `ctl cluster restore` as Talos and Metropolis operators look for it. */
const RESTORE_PARAMETERS = action({
  name: "restore",
  args: [{ name: "backup", complete: "file" }, FILE],
  flags: [TIME_SERVER_FLAG, CA_FLAG, ALLOW_UNSIGNED_FLAG],
  description: "Write parameters that create the cluster again from a backup its CA signed (they hold its every key: the node deletes them once read)",
  run: (ctl, [backup, file], flags) => {
    const key = readOwnerKey(ctl.ownerKey ?? ctl.paths().ownerKey);
    const plan = readForRestore(backup, key, backupTrust(ctl, flags));
    const { header } = plan;
    ctl.note(plan.signature ? `signed by the cluster CA ${plan.ca.fingerprint256}` : "UNSIGNED (format 1, accepted with --allow-unsigned): only its header says which cluster it is of");
    for (const line of [...describeBackup(header).split("\n"), ...describeRestore(header)]) ctl.note(line);
    writeParameters(file, restoreParameters(key, plan, flags["time-server"] ?? []));
    ctl.print({ written: file, kind: "restore" }, `restore parameters written to ${file}`);
  },
});

/** --boot: 0, -1 or -2 (the boots a node keeps). */
function bootNumber(text: string): number {
  const n = Number(text);
  if (!/^-?\d+$/.test(text.trim()) || n > 0 || n < -2) throw new UsageError("use 0 (this boot), -1 (the one before) or -2");
  return n;
}

/** ctl events: how many come first unless -n says otherwise, and at most. */
const DEFAULT_EVENT_LINES = 100;
const MAX_EVENT_LINES = 10_000;

const LEVEL_NAMES = Object.keys(LOG_LEVELS) as (keyof typeof LOG_LEVELS)[];
/** `ctl node logs` prints this many entries unless -n says otherwise. */
const DEFAULT_LOG_LINES = 100;
const MAX_LOG_LINES = 100_000;

export const program: Program<Ctl, typeof FLAGS> = {
  name: "ctl",
  description: "the owner's command line for a nodecore cluster",
  flags: FLAGS,
  commands: [
    command({ name: "version", description: "Print the version", run: () => console.log(VERSION) }),
    command({
      name: "help",
      args: [{ name: "command", optional: true, variadic: true }],
      description: "Show what ctl, a command or an action takes (the same as --help)",
      run: (_ctl, [words]) => console.log(helpText(program, parseCommandLine(program, words))),
    }),
    command({
      name: "genkey",
      description: "Create a new owner key and print its public key",
      run: (ctl) => {
        const file = ctl.ownerKey ?? ctl.paths().ownerKey;
        const key = generateOwnerKey(file);
        const publicKey = Buffer.from(rawPublicKey(key.publicKey)).toString("hex");
        ctl.print({ ownerKey: file, publicKey }, `owner key written to ${file}\npublic key: ${publicKey}`);
      },
    }),
    command({
      name: "takeownership",
      args: [{ name: "endpoint" }],
      flags: [{ name: "replace-ca", description: "Trust the cluster's CA even though it is not the CA pinned in the config directory (ca.crt), and pin it instead" }],
      description: "Prove the owner key to a node and save the owner's credentials (refused if the cluster's CA is not the one pinned here)",
      run: async (ctl, [endpoint], flags) => {
        const paths = ctl.paths();
        const key = readOwnerKey(ctl.ownerKey ?? paths.ownerKey);
        ctl.progress(`proving the owner key to ${endpoint} ...`);
        const result = await takeOwnership(endpoint, key, ctl.settings);
        const pinned = readPinnedCA(paths);
        if (pinned && pinned.fingerprint256 !== result.ca.fingerprint256) {
          if (!flags["replace-ca"]) {
            throw new OperatorError(
              `the cluster at ${endpoint} has CA ${result.ca.fingerprint256}, not the CA pinned in ${paths.ca} (${pinned.fingerprint256}): nothing was saved. If this is a new cluster you own, run again with --replace-ca`,
            );
          }
          ctl.note(`replacing the pinned CA ${pinned.fingerprint256} with ${result.ca.fingerprint256} (--replace-ca)`);
        }
        saveCredentials(paths, result);
        const curators = result.endpoints.map(formatEndpoint);
        ctl.print({ config: paths.dir, endpoints: curators }, `took ownership; credentials saved in ${paths.dir}\ncurators: ${curators.join(", ")}`);
      },
    }),
    {
      name: "cluster",
      description: "The cluster as a whole",
      actions: [
        action({
          name: "info",
          description: "Show the curators and the CA fingerprint, and save the curator list",
          run: async (ctl) => {
            const paths = ctl.paths();
            const credentials = ctl.credentials();
            const { info, port } = await withFailover(Management, credentials, async (m, e) => ({ info: await m.getClusterInfo({}, ctl.settings), port: e.port }), ctl.progress);
            // Curators all listen on one port: the one that answered.
            const endpoints = endpointsOfDirectory(info.clusterDirectory, port);
            if (endpoints.length) saveCredentials(paths, { certificate: credentials.certificate, ca: credentials.ca, endpoints });
            const curators = endpoints.map(formatEndpoint);
            const fingerprint = new X509Certificate(info.caCertificate).fingerprint256;
            const coldStart = describeColdStart(info.clusterDirectory?.nodes.length ?? 0, info.unlockShareThreshold);
            const leaders = { curator: info.curatorLeader || "(none elected)", etcd: info.etcdLeader || "(not known)" };
            const backups = describeBackupSchedule(info.backupSchedule, info.backupStatus);
            ctl.print(
              { curators, leaders, caFingerprint: fingerprint, unlockShareThreshold: info.unlockShareThreshold, coldStart, backups },
              `curators: ${curators.join(", ") || "(none)"}\ncurator leader: ${leaders.curator}\netcd raft leader: ${leaders.etcd}\nCA fingerprint (SHA-256): ${fingerprint}\ncold start: ${coldStart}\n${backups.lines.join("\n")}`,
            );
          },
        }),
        action({
          name: "update",
          flags: [
            { name: "image", value: "dir", description: "The update bundle: the slot directory bun run image writes (out/image/slot)", complete: "dir" },
            {
              name: "max-unavailable",
              value: "N",
              description: "How many workers are updated (and drained) at once (controllers and consensus members always go one at a time)",
              default: 1,
              parse: positiveInteger("max-unavailable", 64),
            },
            { name: "allow-downgrade", description: "Install a version older than the nodes'" },
            { name: "force", description: "Update nodes that are not HEALTHY, and nodes that failed this version before" },
            DRAIN_TIMEOUT_FLAG,
            { name: "no-drain", description: "Do not drain nodes with a kubelet before their reboot: their pods stop with them, without their PodDisruptionBudgets being asked" },
            { name: "dry-run", description: "Print the plan (the order, each node's versions now and after, what each drain would evict) and what would refuse it; change nothing" },
          ],
          description:
            "Update every node to a new version: Kubernetes controllers first, then the other consensus members, one by one, then the rest; each drained first and HEALTHY again before the next; run again to resume",
          run: async (ctl, _args, flags) => {
            const dir = flags.image;
            if (dir === undefined) throw new UsageError("--image <dir> is required: the update bundle (bun run image writes out/image/slot)");
            const bundle = await readBundle(dir, ctl.progress);
            if (flags["dry-run"]) {
              const plan = await dryRunClusterUpdate(ctl.credentials(), ctl.settings, bundle, { drain: !flags["no-drain"] });
              return ctl.print(plan, describeDryRun(plan));
            }
            const result = await updateCluster(
              ctl.credentials(),
              ctl.settings,
              bundle,
              { maxUnavailable: flags["max-unavailable"], force: flags.force, allowDowngrade: flags["allow-downgrade"], drain: !flags["no-drain"], drainTimeoutMs: flags["drain-timeout"] * 1000 },
              { note: ctl.note, progress: ctl.progress },
            );
            const updated = result.steps.filter((s) => s.outcome === "updated").length;
            ctl.print(result, `every node runs ${result.version}: ${updated} updated, ${result.steps.length - updated} already there, in ${result.seconds} s`);
          },
        }),
        action({
          name: "health",
          flags: [
            { name: "wait", description: "Ask again until every check passes, or --wait-timeout runs out" },
            { name: "wait-timeout", value: "seconds", description: "How long --wait waits", default: 300, parse: positiveInteger("seconds", 24 * 3600) },
          ],
          description: "One verdict for the cluster: nodes, clocks, consensus, curator, backups, Kubernetes; exits 0 healthy, 1 degraded, 2 unreachable",
          run: async (ctl, _args, flags) => {
            const result = await clusterVerdict(ctl.credentials(), ctl.settings, flags.wait ? Date.now() + flags["wait-timeout"] * 1000 : undefined);
            if (result.verdict === "unreachable") ctl.print({ verdict: result.verdict, reason: result.reason, checks: [] }, `cluster: unreachable (${result.reason})`);
            else ctl.print({ verdict: result.verdict, checks: result.health.checks }, healthTable(result.health));
            return result.exitStatus;
          },
        }),
        action({
          name: "backup",
          args: [FILE],
          description: "Write a backup of the cluster (etcd's snapshot, encrypted to the owner key by the curator leader) to <file>; never overwrites one",
          run: async (ctl, [file]) => {
            const { header, bytes } = await takeBackup(ctl.credentials(), ctl.settings, file, ctl.progress);
            ctl.print({ file, bytes, header }, `backup written to ${file} (${bytes} bytes)\n${describeBackup(header)}`);
          },
        }),
        action({
          name: "recover",
          flags: [
            { name: "from", value: "node", description: "The consensus node that survived: its ID (found in the ctl config's curator list), or node-…@address" },
            { name: "yes", description: "Go ahead: without it, the plan is printed and nothing is done" },
            { name: "force", description: "Recover even though a quorum still answers (the other members are lost for good)" },
            { name: "dry-run", description: "Print the plan only" },
          ],
          description: "After losing etcd's quorum for good: restart the surviving member as a one-member cluster from its own data, and drop the others' consensus role",
          run: async (ctl, _args, flags) => {
            const from = flags.from;
            if (!from) throw new UsageError("missing --from <node>: name the consensus node that survived");
            const result = await recoverConsensus(ctl.credentials(), ctl.settings, from, { dryRun: flags["dry-run"], yes: flags.yes, force: flags.force }, { note: ctl.note, progress: ctl.progress });
            const summary = result.started
              ? `recovered: ${result.survivor} is etcd's only member, at revision ${result.revision} or later; ${result.lost.length} member${result.lost.length === 1 ? "" : "s"} removed`
              : "dry run: nothing was done";
            ctl.print(result, summary);
          },
        }),
        action({
          name: "schedule-backups",
          flags: [
            { name: "every", value: "minutes", description: "Minutes between two backups; 0 turns scheduled backups off", parse: wholeNumber("minutes", 7 * 24 * 60) },
            { name: "keep", value: "N", description: "How many backups to keep (the newest proven one always stays)", default: 7, parse: positiveInteger("backups", 100) },
            { name: "node", value: "node", description: "The consensus node that takes them onto its data partition" },
            { name: "upload", value: "url", description: "Also PUT each proven backup under this http(s) URL, by its file name (a query is kept); nodecore never deletes there" },
          ],
          description: "Have a consensus node back the cluster up every so often onto its data partition (and an HTTP target), encrypted to the owner key, and prove each backup restores",
          run: async (ctl, _args, flags) => {
            const { every, keep } = flags;
            if (every === undefined) throw new UsageError("missing --every <minutes> (0 turns scheduled backups off)");
            const typed = flags.node;
            if (every > 0 && !typed) throw new UsageError("missing --node <node>: the consensus node that takes the backups");
            const nodeId = typed ? await ctl.node(typed) : "";
            const putUrl = flags.upload ?? "";
            const problem = putUrl ? targetUrlProblem(putUrl) : undefined;
            if (problem) throw new UsageError(`--upload: ${problem}`);
            await withFailover(Management, ctl.credentials(), (m) => m.setBackupSchedule({ schedule: { everyMinutes: every, keep, nodeId, putUrl } }, ctl.settings), ctl.progress);
            const also = putUrl ? `, sends each proven one to ${shownTarget(putUrl)}` : "";
            ctl.print(
              { everyMinutes: every, keep, node: nodeId, ...(putUrl ? { upload: shownTarget(putUrl) } : {}) },
              every === 0 ? "scheduled backups off" : `${nodeId} backs the cluster up every ${every} min and keeps ${keep}${also}; ctl cluster info says how it goes`,
            );
          },
        }),
        action({
          name: "registry",
          args: [
            { name: "action", choices: ["set", "list", "remove", "login", "logout"] },
            { name: "host", optional: true },
          ],
          flags: [
            { name: "mirror", value: "url", description: "A mirror tried before the host itself (https://… or http://…), in the order given", repeatable: true },
            { name: "mirrors-only", description: "Pull only from the mirrors, never from the host itself" },
            { name: "no-peers", description: "Never fetch this host's images from other workers (the peer mirror): for images some pods may pull with their own imagePullSecrets and others may not" },
            { name: "ca", value: "file", description: "PEM certificates that sign the host's and its mirrors' TLS certificates", complete: "file" },
            { name: "skip-verify", description: "Do not verify the host's and mirrors' TLS certificates (insecure; shown in the listing)" },
            { name: "username", value: "user", description: "The registry login's user (with --password-stdin)" },
            { name: "password-stdin", description: "Read the login's password (or access token) from stdin" },
            { name: "password", value: "refused", description: "Refused: a password is read from stdin only (--password-stdin)", parse: () => true },
          ],
          description:
            "How workers pull images: set <host> [--mirror url]... [--ca file] [--username u --password-stdin] [--skip-verify] [--mirrors-only] [--no-peers], list, remove <host>, login <host> --username u --password-stdin, logout <host>",
          run: async (ctl, [action, typedHost], flags) => {
            const registryFlags: RegistryFlags = {
              mirrors: flags.mirror,
              ...(flags.ca !== undefined ? { ca: flags.ca } : {}),
              skipVerify: flags["skip-verify"],
              noUpstream: flags["mirrors-only"],
              noPeers: flags["no-peers"],
              ...(flags.username !== undefined ? { username: flags.username } : {}),
              passwordStdin: flags["password-stdin"],
              passwordTyped: flags.password !== undefined,
            };
            if (registryFlags.passwordTyped) throw new UsageError(PASSWORD_ON_COMMAND_LINE);
            const readStdin = () => readFileSync(0, "utf8");
            const call = <T>(f: (m: CuratorClientOf<typeof Management>) => Promise<T>) => withFailover(Management, ctl.credentials(), f, ctl.progress);
            switch (action) {
              case "list": {
                const { registries } = await call((m) => m.listContainerRegistries({}, ctl.settings));
                ctl.print(
                  registries.map((r) => ({
                    host: r.host,
                    mirrors: r.mirrors,
                    upstream: !r.upstreamDisabled,
                    peers: !r.peersDisabled,
                    ca: r.ca ? r.ca.split("\n") : [],
                    skipVerify: r.skipVerify,
                    login: r.hasCredentials ? { username: r.username } : null,
                  })),
                  registryTable(registries),
                );
                return;
              }
              case "set": {
                const entry = registryEntry(typedHost ?? "", registryFlags, readStdin);
                await call((m) => m.setContainerRegistry({ registry: entry }, ctl.settings));
                const clear = entry.credentials ? entry.mirrors.filter((m) => m.startsWith("http://")) : [];
                if (clear.length) ctl.note(`${clear.join(", ")}: plain http; the login is offered to it, in clear, if it asks for one`);
                const order = [...(entry.peersDisabled ? [] : ["the other workers (by digest)"]), ...entry.mirrors, ...(entry.upstreamDisabled ? [] : [entry.host])].join(", then ");
                ctl.print(
                  { host: entry.host, order: order.split(", then "), login: entry.credentials ? { username: entry.credentials.username } : null, skipVerify: entry.skipVerify },
                  `${entry.host}: pulled from ${order}${entry.caPem ? "; TLS verified against the given CA" : ""}${entry.skipVerify ? "; TLS NOT verified" : ""}${entry.credentials ? `; login ${entry.credentials.username || "(token)"}` : ""}. Applies to the next pull on every worker.`,
                );
                return;
              }
              case "login": {
                const host = registryHost(typedHost);
                const credentials = registryCredentials(registryFlags, readStdin);
                if (!credentials) throw new UsageError("login needs --username <user> --password-stdin (the password or token piped in)");
                await call((m) => m.setContainerRegistryCredentials({ host, credentials }, ctl.settings));
                ctl.print({ host, username: credentials.username }, `${host}: workers log in as ${credentials.username || "(token)"} from the next pull on`);
                return;
              }
              case "logout": {
                const host = registryHost(typedHost);
                await call((m) => m.setContainerRegistryCredentials({ host }, ctl.settings));
                ctl.print({ host }, `${host}: workers pull without a login from the next pull on`);
                return;
              }
              case "remove": {
                const host = registryHost(typedHost);
                await call((m) => m.removeContainerRegistry({ host }, ctl.settings));
                ctl.print({ host }, `${host}: entry removed; its images are pulled from the host itself again`);
                return;
              }
            }
          },
        }),
        action({
          name: "manifests",
          args: [
            { name: "action", choices: ["apply", "list", "delete"] },
            { name: "target", optional: true },
          ],
          flags: [{ name: "name", value: "name", description: "The manifest's name when applying one file (default: the file's name without its extension)" }],
          description:
            "Add-on manifests every Kubernetes controller applies (server-side apply): apply <file|dir> [--name n] (YAML or JSON; a folder: one manifest per file), list, delete <name> (its objects stay)",
          run: async (ctl, [action, target], flags) => {
            const call = <T>(f: (m: CuratorClientOf<typeof Management>) => Promise<T>) => withFailover(Management, ctl.credentials(), f, ctl.progress);
            switch (action) {
              case "list": {
                const { manifests } = await call((m) => m.listManifests({}, ctl.settings));
                ctl.print(
                  manifests.map((m) => ({ name: m.name, objects: m.objects, bytes: m.bytes, sha256: m.sha256, storedMs: Number(m.updatedMs) })),
                  manifestTable(manifests),
                );
                return;
              }
              case "apply": {
                if (!target) throw new UsageError("missing <file|dir>: a YAML or JSON file of Kubernetes objects, or a folder of them");
                const files = await manifestFiles(target, flags.name);
                const stored: { name: string; file: string; objects: number; sha256: string }[] = [];
                for (const file of files) {
                  const { sha256 } = await call((m) => m.applyManifest({ manifest: { name: file.name, objectsJson: file.objectsJson } }, ctl.settings));
                  stored.push({ name: file.name, file: file.file, objects: file.objects, sha256 });
                }
                ctl.print(
                  stored,
                  `${stored.map((s) => `${s.name} (${s.objects} object${s.objects === 1 ? "" : "s"}, from ${s.file})`).join(", ")} stored; the controllers apply ${stored.length === 1 ? "it" : "them"} (ctl cluster health says how it went)`,
                );
                return;
              }
              case "delete": {
                if (!target) throw new UsageError("missing <name>: a stored manifest's name (ctl cluster manifests list)");
                await call((m) => m.deleteManifest({ name: target }, ctl.settings));
                ctl.print({ name: target }, `${target}: forgotten; its objects stay in Kubernetes (kubectl delete removes them)`);
                return;
              }
            }
          },
        }),
        RESTORE_PARAMETERS,
        action({
          name: "check-backup",
          args: [FILE],
          flags: [CA_FLAG, ALLOW_UNSIGNED_FLAG],
          description: "Read a backup with the owner key: decrypt it, check etcd's own checksum of the snapshot, and that this cluster's CA (ca.crt, or --ca) signed it",
          run: async (ctl, [file], flags) => {
            const owner = readOwnerKey(ctl.ownerKey ?? ctl.paths().ownerKey);
            const trust = backupTrust(ctl, flags);
            const { header, databaseBytes, signedBy } = checkBackup(file, owner, trust);
            const whose = !trust.ca
              ? "; NOT checked for which cluster wrote it: no pinned CA here (ca.crt), give it with --ca"
              : signedBy
                ? `, signed by this cluster's CA (${signedBy})`
                : ", UNSIGNED (format 1, accepted with --allow-unsigned): only its header says it is of this cluster";
            ctl.print(
              { file, header, databaseBytes, signedBy: signedBy ?? null },
              `${file}: readable with this owner key, etcd's checksum matches (${databaseBytes} bytes of database)${whose}\n${describeBackup(header)}`,
            );
          },
        }),
      ],
    },
    command({
      name: "ticket",
      description: "Print the register ticket new nodes need",
      run: async (ctl) => {
        const { ticket } = await withFailover(Management, ctl.credentials(), (m) => m.getRegisterTicket({}, ctl.settings), ctl.progress);
        const hex = Buffer.from(ticket).toString("hex");
        ctl.print({ ticket: hex }, hex);
      },
    }),
    {
      name: "node",
      description: "The cluster's nodes",
      actions: [
        action({
          name: "list",
          flags: [
            { name: "ids", description: "Print only the node IDs and name labels, one per line (shell completion uses it)" },
            { name: "filter", value: "terms", description: "Only the nodes matching every comma-separated term: state=UP, role=consensus, health=DEGRADED, or a label key=value (key alone: has it)" },
          ],
          description: "List the nodes with their state, health, last heartbeat, address and roles",
          run: async (ctl, _args, flags) => {
            const { filter } = flags;
            const select = (list: Awaited<ReturnType<typeof listNodes>>) => {
              try {
                return filter === undefined ? list : filterNodes(list, filter);
              } catch (err) {
                if (err instanceof FilterError) throw new UsageError(`--filter: ${err.message}`);
                throw err;
              }
            };
            // A bad filter is refused before anything is asked.
            select([]);
            const nodes = select(await listNodes(ctl.credentials(), ctl.settings));
            if (flags.ids) {
              for (const node of nodes) {
                ctl.printLine(node.id);
                const name = node.labels.find((l) => l.startsWith(`${NAME_LABEL}=`));
                if (name) ctl.printLine(name.slice(NAME_LABEL.length + 1));
              }
              return;
            }
            ctl.print(nodes, nodeTable(nodes));
          },
        }),
        action({
          name: "describe",
          args: [NODE_ID],
          description: "Show one node: its record, and every service line it reports (mesh peers and handshakes, kube-proxy, cluster DNS, ...)",
          run: async (ctl, [typed]) => {
            const id = await ctl.node(typed);
            const node = (await listNodes(ctl.credentials(), ctl.settings)).find((n) => n.id === id);
            if (!node) throw new Error(`node ${id} is not in the cluster`);
            ctl.print(node, describeNode(node));
          },
        }),
        action({
          name: "approve",
          args: [NODE_ID],
          description: "Let a NEW node commit and become part of the cluster",
          run: async (ctl, [typed]) => {
            const id = await ctl.node(typed);
            const approval = await approveNode(ctl.credentials(), { id: id, ...ctl.settings });
            const human = approval.approved ? `approved ${id}${approval.after ? ` (now ${approval.after})` : ""}` : `${id} is ${approval.before} already: nothing to approve`;
            ctl.print(approval, human);
          },
        }),
        action({
          name: "delete",
          args: [NODE_ID],
          description: "Remove a node from the cluster (not a consensus member); it cannot join or register again until undeleted",
          run: async (ctl, [typed]) => {
            const id = await ctl.node(typed);
            await withFailover(Management, ctl.credentials(), (m) => m.deleteNode({ id: id }, ctl.settings), ctl.progress);
            ctl.print({ deleted: id }, `deleted ${id}: its record and join key are gone, its certificate no longer gets it in, and it cannot register again (ctl node undelete ${id} lifts that)`);
          },
        }),
        action({
          name: "reset",
          args: [NODE_ID],
          flags: [
            { name: "wipe", description: "Also destroy the data partition's key slots (crypto-erase): nothing can open it again" },
            DRAIN_TIMEOUT_FLAG,
            { name: "no-drain", description: "Do not drain a worker first: its pods end with it, without their PodDisruptionBudgets being asked" },
          ],
          description: "Drain a worker, make the node leave the cluster (consensus first), delete it (and its Node), erase what it keeps to join with, and reboot it into no parameters",
          run: async (ctl, [typed], flags) => {
            const id = await ctl.node(typed);
            const result = await resetNode(
              ctl.credentials(),
              ctl.settings,
              id,
              flags.wipe,
              { note: ctl.note, progress: ctl.progress },
              { drain: !flags["no-drain"], drainTimeoutMs: flags["drain-timeout"] * 1000 },
            );
            ctl.print(result, `${id} was reset${result.wiped ? " and wiped" : ""}; it reboots with no parameters`);
          },
        }),
        action({
          name: "undelete",
          // A deleted node is in no list to resolve a prefix against: its whole ID.
          args: [{ name: "node id" }],
          description: "Let a deleted node register again (it then waits for approval like a new one)",
          run: async (ctl, [id]) => {
            await withFailover(Management, ctl.credentials(), (m) => m.undeleteNode({ id: id }, ctl.settings), ctl.progress);
            ctl.print({ undeleted: id }, `${id} may register again; approve it once it has`);
          },
        }),
        action({
          name: "logs",
          args: [NODE_ID, { name: "path", optional: true }],
          flags: [
            { name: "follow", short: "f", description: "Keep printing new entries until interrupted" },
            { name: "lines", short: "n", value: "N", description: "How many of the latest entries to print first", default: DEFAULT_LOG_LINES, parse: positiveInteger("lines", MAX_LOG_LINES) },
            { name: "level", value: "level", description: "Leave out entries below this level", choices: LEVEL_NAMES },
            { name: "boot", value: "N", description: "Which boot: 0 this one, -1 the one before (kept on the node's data partition), -2", default: 0, parse: bootNumber },
          ],
          description: "Print a node's logs: a runnable and those below it (root.roleserve), or kernel; --boot -1 for what it logged before it last rebooted",
          run: async (ctl, [typed, path], flags) => {
            const { follow, boot } = flags;
            if (follow && boot !== 0) throw new UsageError("--follow reads this boot only; leave out --boot, or --follow");
            const id = await ctl.node(typed);
            const stop = new AbortController();
            if (follow) process.once("SIGINT", () => stop.abort(new Error("interrupted")));
            ctl.progress(`reading the logs of ${id} ...`);
            await readLogs(
              ctl.credentials(),
              id,
              {
                path: path ?? "",
                subtree: true,
                backlog: flags.lines,
                follow,
                boot,
                ...(flags.level ? { minLevel: LOG_LEVELS[flags.level] } : {}),
              },
              {
                ...ctl.settings,
                signal: stop.signal,
                // --json: one object per line, so that a follower can be piped.
                print: (entry) => ctl.printLine(ctl.json ? JSON.stringify(logEntryJson(entry)) : formatLogEntry(entry)),
                // What happens to the node goes to stderr, so that stdout stays the log.
                note: (line) => ctl.note(line),
              },
            );
          },
        }),
        action({
          name: "services",
          args: [NODE_ID],
          description: "List what runs on a node: state, restarts, time since the last change, last error",
          run: async (ctl, [typed]) => {
            const id = await ctl.node(typed);
            const rows = await withNode(
              ctl.credentials(),
              id,
              async (client) =>
                (await client.getServices({}, ctl.settings)).services.map((s) => ({ path: s.path, state: s.state, restarts: s.restarts, lastError: s.lastError, sinceMs: Number(s.sinceMs) })),
              ctl.settings,
            );
            ctl.print(rows, serviceTable(rows));
          },
        }),
        action({
          name: "reboot",
          args: [NODE_ID],
          flags: [{ name: "wait", description: "Return once the node has booted again and is HEALTHY (a reboot that drained always waits, to uncordon)" }, ...POWER_DRAIN_FLAGS],
          description: "Drain a worker's Node, stop the node's services cleanly and restart it, then uncordon its Node once Ready again",
          run: async (ctl, [typed], flags) => {
            const result = await powerNodeFromCtl(ctl, typed, "reboot", { wait: flags.wait, noDrain: flags["no-drain"], drainTimeoutS: flags["drain-timeout"], force: flags.force });
            if (result.seconds === undefined) return ctl.print({ rebooting: result.node, ...powerJson(result) }, `${result.node} is stopping its services and will restart`);
            ctl.print(
              { rebooted: result.node, seconds: result.seconds, health: result.health, ...powerJson(result) },
              `${result.node} rebooted and is ${result.health} again after ${result.seconds} s${result.uncordoned ? ", its Node Ready and uncordoned" : ""}`,
            );
          },
        }),
        action({
          name: "drain",
          args: [NODE_ID],
          flags: [DRAIN_TIMEOUT_FLAG, { name: "force", description: "Evict pods that no controller would make again (bare pods): they are gone for good" }],
          description: "Cordon a worker's Node and evict its pods through the Eviction API (PodDisruptionBudgets kept; DaemonSet and static pods stay), as kubectl drain does",
          run: async (ctl, [typed], flags) => {
            const id = await ctl.node(typed);
            const api = await ownerKubernetes(ctl.credentials(), ctl.settings);
            const result = await drainNode(api, id, { timeoutMs: flags["drain-timeout"] * 1000, force: flags.force, say: { note: ctl.note, progress: ctl.progress } });
            if (!result.hasNode) return ctl.print({ drained: id, hasNode: false }, `${id} has no Node (no kubelet registered it): nothing to drain`);
            ctl.print(
              { drained: id, evicted: result.evicted, stayed: result.stayed, seconds: result.seconds },
              [`${id} drained in ${result.seconds} s and cordoned: ${result.evicted.length} evicted`, ...result.stayed.map((s) => `  stayed: ${s.pod} (${s.why})`)].join("\n"),
            );
          },
        }),
        action({
          name: "uncordon",
          args: [NODE_ID],
          description: "Make a worker's Node schedulable again (after ctl node drain)",
          run: async (ctl, [typed]) => {
            const id = await ctl.node(typed);
            const api = await ownerKubernetes(ctl.credentials(), ctl.settings);
            if (!(await setUnschedulable(api, id, false))) return ctl.print({ uncordoned: id, hasNode: false }, `${id} has no Node: nothing to uncordon`);
            ctl.print({ uncordoned: id }, `${id} is schedulable again`);
          },
        }),
        action({
          name: "update",
          args: [NODE_ID],
          flags: [
            { name: "image", value: "dir", description: "The update bundle: the slot directory bun run image writes (out/image/slot)", complete: "dir" },
            { name: "activate", description: "Reboot into the new version as soon as it is installed (else at the next reboot)" },
            { name: "wait", description: "With --activate: return once the node is back, HEALTHY, at the new version (or say why it rolled back)" },
            { name: "allow-downgrade", description: "Install a version older than the node's" },
            { name: "force", description: "Update a node that is not HEALTHY" },
          ],
          description: "Write a new version into the node's other system slot; it boots once as a trial, and stays only if the node rejoins",
          run: async (ctl, [typed], flags) => {
            const dir = flags.image;
            if (dir === undefined) throw new UsageError("--image <dir> is required: the update bundle (bun run image writes out/image/slot)");
            if (flags.wait && !flags.activate) throw new UsageError("--wait waits for the reboot that --activate starts; pass both, or neither");
            // The bundle is checked here before anyone is asked anything.
            const bundle = await readBundle(dir, ctl.progress);
            const id = await ctl.node(typed);
            const result = await updateNode(
              ctl.credentials(),
              ctl.settings,
              id,
              bundle,
              { activate: flags.activate, wait: flags.wait, allowDowngrade: flags["allow-downgrade"], force: flags.force },
              { note: ctl.note, progress: ctl.progress },
            );
            const human =
              result.seconds !== undefined
                ? `${id} runs ${result.version} from slot ${result.slot}, HEALTHY, ${result.seconds} s after the update began`
                : result.activated
                  ? `${id} reboots into ${result.version} (slot ${result.slot}); it stays there once it has rejoined`
                  : `${result.version} is installed in slot ${result.slot} of ${id}; it boots at the node's next reboot (ctl node reboot ${typed})`;
            ctl.print(result, human);
          },
        }),
        action({
          name: "rollback",
          args: [NODE_ID],
          flags: [
            { name: "activate", description: "Reboot into it now (else at the next reboot)" },
            { name: "wait", description: "With --activate: return once the node is back, HEALTHY, on the other slot's version (or say why it came back on this one)" },
            { name: "force", description: "Boot the other slot even though it failed before" },
          ],
          description: "Boot the node's other system slot, once, as a trial: it stays only if the node rejoins on it",
          run: async (ctl, [typed], flags) => {
            if (flags.wait && !flags.activate) throw new UsageError("--wait waits for the reboot that --activate starts; pass both, or neither");
            const id = await ctl.node(typed);
            const result = await rollbackNode(ctl.credentials(), ctl.settings, id, { force: flags.force, activate: flags.activate, wait: flags.wait }, { note: ctl.note, progress: ctl.progress });
            const human =
              result.seconds !== undefined
                ? `${id} runs ${result.version} from slot ${result.slot}, HEALTHY, ${result.seconds} s after the rollback began`
                : `${id} boots slot ${result.slot} (${result.version}) ${result.activated ? "now" : "at its next reboot"}, once; it stays there if the node rejoins`;
            ctl.print(result, human);
          },
        }),
        action({
          name: "poweroff",
          args: [NODE_ID],
          flags: POWER_DRAIN_FLAGS,
          description: "Drain a worker's Node (it stays cordoned), stop the node's services cleanly and power it off",
          run: async (ctl, [typed], flags) => {
            const result = await powerNodeFromCtl(ctl, typed, "poweroff", { wait: false, noDrain: flags["no-drain"], drainTimeoutS: flags["drain-timeout"], force: flags.force });
            ctl.print({ poweringOff: result.node, ...powerJson(result) }, `${result.node} is stopping its services and will power off`);
          },
        }),
        action({
          name: "label",
          args: [NODE_ID, { name: "key=value|key-", variadic: true }],
          description: "Set (key=value) or remove (key-) labels of a node, in one change",
          run: async (ctl, [typed, changes]) => {
            let parsed;
            try {
              parsed = parseLabelArgs(changes);
            } catch (err) {
              throw new UsageError((err as Error).message);
            }
            const id = await ctl.node(typed);
            const { labels } = await withFailover(Management, ctl.credentials(), (m) => m.updateNodeLabels({ id: id, upsert: parsed.upsert, delete: parsed.remove }, ctl.settings), ctl.progress);
            const now = labels.map((l) => `${l.key}=${l.value}`);
            ctl.print({ node: id, labels: now }, `labels of ${id}: ${now.join(", ") || "(none)"}`);
          },
        }),
        action({
          name: "roles",
          args: [{ name: "operation", choices: ["set", "unset"] }, NODE_ID, { name: "role", variadic: true, choices: ROLE_NAMES }],
          description: "Set or clear roles of a node",
          run: async (ctl, [verb, typed, roles]) => {
            const id = await ctl.node(typed);
            const request: Record<string, unknown> = { id };
            for (const role of roles) request[ROLE_FIELDS[role]] = verb === "set";
            await withFailover(Management, ctl.credentials(), (m) => m.updateNodeRoles(request, ctl.settings), ctl.progress);
            ctl.print({ node: id, [verb!]: roles }, `${verb} ${roles.join(", ")} on ${id}`);
          },
        }),
      ],
    },
    {
      name: "image",
      description: "Container images on the workers: offline bundles imported, what each node holds",
      actions: [
        action({
          name: "import",
          args: [FILE],
          flags: [{ name: "node", value: "node", description: "A node to import onto (default: every UP worker)", repeatable: true }],
          description:
            "Import an offline bundle (an OCI image layout or a docker save tar) into workers' image stores, four nodes at a time, checked whole before anything is added; it stays across reboots",
          run: async (ctl, [file], flags) => {
            const { images, bytes } = await checkBundleFile(file);
            const named = await Promise.all(flags.node.map((typed) => ctl.node(typed)));
            const credentials = ctl.credentials();
            const targets = importTargets(await listNodes(credentials, ctl.settings), named);
            const { imported, failed } = await importOntoAll(credentials, targets, file, bytes, ctl, (node, result) => {
              if (result.ok) ctl.note(`${node.id}: imported ${result.value.join(", ")}`);
            });
            if (failed.length > 0) {
              const done = imported.length ? `; imported on ${imported.map((r) => r.node.id).join(", ")}` : "";
              throw new OperatorError(`the import failed on ${failed.length} of ${targets.length} nodes: ${failed.map((f) => `${f.node.id}: ${f.error.message}`).join("; ")}${done}`);
            }
            const results = imported.map((r) => ({ node: r.node.id, images: r.images }));
            ctl.print(
              { file, bytes, images, nodes: results },
              `${images.length} image${images.length === 1 ? "" : "s"} (${images.join(", ")}) on ${results.length} node${results.length === 1 ? "" : "s"}: ${results.map((r) => r.node).join(", ")}`,
            );
          },
        }),
        action({
          name: "list",
          flags: [{ name: "node", value: "node", description: "A node to list (default: every UP worker)", repeatable: true }],
          description: "The images each worker's image store holds, by name",
          run: async (ctl, _args, flags) => {
            const named = await Promise.all(flags.node.map((typed) => ctl.node(typed)));
            const credentials = ctl.credentials();
            const targets = importTargets(await listNodes(credentials, ctl.settings), named);
            // The nodes as listed once, asked at once: each listing is that node's own work.
            const listings = await Promise.all(
              targets.map(async (node) => ({ node: node.id, images: (await withListedNode(credentials, node, (client) => client.listImages({}, ctl.settings))).images })),
            );
            ctl.print(
              listings.map((l) => ({ node: l.node, images: l.images.map((i) => ({ name: i.name, digest: i.digest, size: i.size })) })),
              imageTable(listings),
            );
          },
        }),
      ],
    },
    {
      name: "etcd",
      description: "etcd itself, for inspection and disaster recovery",
      actions: [
        action({
          name: "credentials",
          args: [{ name: "dir", complete: "dir" }],
          description: "Write a client certificate and key for etcdctl into <dir>",
          run: async (ctl, [dir]) => {
            const { example } = await writeEtcdCredentials(ctl.credentials(), ctl.settings, dir);
            ctl.print({ dir, example }, `etcd client credentials written to ${dir}\n${example}`);
          },
        }),
        action({
          name: "status",
          description: "Each consensus node's etcd member: role, database size and use, quota, revision, term; the cluster's alarms",
          run: async (ctl) => {
            const rows = await etcdStatus(ctl.credentials(), ctl.settings);
            ctl.print(rows, etcdStatusTable(rows));
          },
        }),
        action({
          name: "defrag",
          args: [{ name: "node id", optional: true, variadic: true, complete: "node" }],
          description: "Defragment etcd members one at a time, the raft leader last (all consensus nodes unless named); each blocks its member while it runs",
          run: async (ctl, [typed]) => {
            const ids = await Promise.all(typed.map((t) => ctl.node(t)));
            const rows = await defragmentEtcd(ctl.credentials(), ctl.settings, ids, ctl.progress);
            ctl.print(rows, `defragmented ${rows.length} member${rows.length === 1 ? "" : "s"}`);
          },
        }),
      ],
    },
    command({
      name: "events",
      flags: [
        { name: "follow", short: "f", description: "Keep printing new events until interrupted" },
        { name: "lines", short: "n", value: "N", description: "How many of the latest events to print first", default: DEFAULT_EVENT_LINES, parse: positiveInteger("events", MAX_EVENT_LINES) },
        { name: "node", value: "node", description: "Only the events about this node" },
      ],
      description: "Print the cluster's audit trail: who changed what and how it ended, refused calls, health changes and boots",
      run: async (ctl, _args, flags) => {
        const { follow } = flags;
        const nodeId = flags.node === undefined ? "" : await ctl.node(flags.node);
        const stop = new AbortController();
        if (follow) process.once("SIGINT", () => stop.abort(new Error("interrupted")));
        await readEvents(
          ctl.credentials(),
          { last: flags.lines, nodeId, follow },
          {
            ...ctl.settings,
            signal: stop.signal,
            // --json: one object per line, so that a follower can be piped.
            print: (event) => ctl.printLine(ctl.json ? JSON.stringify(eventRow(event)) : eventLine(eventRow(event))),
            note: (line) => ctl.note(line),
          },
        );
      },
    }),
    {
      name: "metrics",
      description: "Prometheus metrics: each node serves them on its node management port, to the owner and to metrics readers",
      actions: [
        action({
          name: "credentials",
          args: [{ name: "dir", complete: "dir" }],
          flags: [
            { name: "name", value: "name", description: "The reader's name, as the audit trail shows it", default: "prometheus" },
            { name: "scrape-interval", value: "seconds", description: "How often the written configuration scrapes each node", default: 15, parse: positiveInteger("seconds", 3600) },
          ],
          description: "Write a metrics reader certificate and key (they read metrics and open nothing else), the cluster CA and a Prometheus configuration with one job per UP node into <dir>",
          run: async (ctl, [dir], flags) => {
            const written = await writeMetricsReader(ctl.credentials(), ctl.settings, dir, flags.name, flags["scrape-interval"]);
            const example = `prometheus --config.file ${written.config}`;
            ctl.print({ ...written, example }, `metrics reader credentials written to ${written.dir}; ${written.targets.length} node(s) in ${written.config}\n${example}`);
          },
        }),
        action({
          name: "show",
          args: [NODE_ID],
          description: "Print one node's metrics, read with the owner's certificate",
          run: async (ctl, [id]) => {
            const text = await readNodeMetrics(ctl.credentials(), ctl.settings, await ctl.node(id));
            ctl.printLine(text.trimEnd());
          },
        }),
      ],
    },
    command({
      name: "kubeconfig",
      args: [{ name: "file", complete: "file" }],
      description: "Write a kubeconfig for kubectl: a Kubernetes client certificate for the owner (user nodecore:owner, cluster-admin), over a key made here and written only into <file>",
      run: async (ctl, [file]) => {
        const written = await writeOwnerKubeconfig(ctl.credentials(), ctl.settings, file);
        const example = `kubectl --kubeconfig ${file} get nodes`;
        ctl.print(
          { file, server: written.server, apiservers: written.apiservers, user: written.user, example },
          `kubeconfig written to ${file} (server ${written.server}, user ${written.user})\n${example}`,
        );
        if (written.warning) ctl.note(`warning: ${written.warning}`);
      },
    }),
    {
      name: "params",
      description: "Node parameters, for new nodes",
      actions: [
        action({
          name: "bootstrap",
          args: [FILE],
          flags: [
            {
              name: "unlock-threshold",
              value: "N",
              description: "How many of the other consensus members' shares open a consensus member's data at a cold start (default: a majority)",
              parse: positiveInteger("shares", MAX_UNLOCK_SHARE_THRESHOLD),
            },
            TIME_SERVER_FLAG,
          ],
          description: "Write parameters that bootstrap a new cluster owned by the owner key",
          run: (ctl, [file], flags) => {
            const key = readOwnerKey(ctl.ownerKey ?? ctl.paths().ownerKey);
            // 0: the node works out a majority.
            const unlockShareThreshold = flags["unlock-threshold"] ?? 0;
            writeParameters(file, bootstrapParameters(key, unlockShareThreshold, flags["time-server"] ?? []));
            ctl.print({ written: file, kind: "bootstrap" }, `bootstrap parameters written to ${file}`);
          },
        }),
        RESTORE_PARAMETERS,
        action({
          name: "register",
          args: [FILE],
          flags: [TIME_SERVER_FLAG],
          description: "Write parameters that register a new node with this cluster (they carry the ticket)",
          run: async (ctl, [file], flags) => {
            writeParameters(file, await registerParameters(ctl.credentials(), ctl.settings, flags["time-server"] ?? []));
            ctl.print({ written: file, kind: "register" }, `register parameters written to ${file}`);
          },
        }),
      ],
    },
    command({
      name: "completion",
      args: [{ name: "shell", choices: SHELLS }],
      description: "Print a shell completion script for ctl",
      run: (_ctl, [shell]) => {
        process.stdout.write(completionScript(program, shell));
      },
    }),
  ],
};
