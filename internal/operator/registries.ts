// `ctl cluster registry`: the owner's side of the cluster's registry
// configuration (internal/curator/registries.ts). Everything is checked
// here first with the rules the curator applies (internal/containerd's
// registryProblem), so a mistake costs no call and is named in one line;
// a password is read from stdin only, never from the command line.

import { create } from "@bufbuild/protobuf";
import { readFileSync } from "node:fs";
import { ContainerRegistrySchema, type ContainerRegistry, type RegistryCredentials } from "../../proto/gen/common/common_pb.ts";
import type { ContainerRegistryShown } from "../../proto/gen/api/management_pb.ts";
import { credentialsProblem, parseCaPem, registryHostProblem, registryProblem } from "../containerd/mod.ts";
import { UsageError } from "./cli_table.ts";
import { alignColumns } from "./format.ts";

/** What `set` and `login` were given. */
export interface RegistryFlags {
  mirrors: readonly string[];
  ca?: string;
  skipVerify: boolean;
  noUpstream: boolean;
  /** The host's images are never fetched from other workers (the peer mirror). */
  noPeers?: boolean;
  username?: string;
  passwordStdin: boolean;
  /** Set when a password was typed on the command line: refused, and never echoed. */
  passwordTyped: boolean;
}

/** The refusal of a password on the command line; it never repeats what was typed. */
export const PASSWORD_ON_COMMAND_LINE = "a password is never taken on the command line (it would stay in the shell's history and in the process list); pipe it in with --password-stdin";

/** A host as typed, checked. */
export function registryHost(host: string | undefined): string {
  if (!host) throw new UsageError("missing <host>: the registry host as image names spell it (registry.example.com, 10.0.0.5:5000, docker.io)");
  const problem = registryHostProblem(host);
  if (problem) throw new UsageError(`<host>: ${problem}`);
  return host;
}

/** The password from `stdin`'s text: its first line, without the line end. */
export function passwordFromStdin(text: string): string {
  const password = text.replace(/\r?\n$/, "");
  if (password.includes("\n")) throw new UsageError("--password-stdin: stdin holds more than one line; give the password (or token) alone");
  if (password === "") throw new UsageError("--password-stdin: stdin was empty");
  return password;
}

/** The credentials `login` (or `set`) was given, checked; undefined when neither a user nor a password was. */
export function registryCredentials(flags: RegistryFlags, readStdin: () => string): RegistryCredentials | undefined {
  if (flags.passwordTyped) throw new UsageError(PASSWORD_ON_COMMAND_LINE);
  if (flags.username === undefined && !flags.passwordStdin) return undefined;
  if (!flags.passwordStdin) throw new UsageError("--username needs --password-stdin: pipe the password (or token) in");
  const credentials = { username: flags.username ?? "", password: passwordFromStdin(readStdin()) } as RegistryCredentials;
  const problem = credentialsProblem(credentials);
  if (problem) throw new UsageError(problem.replace(/^password:/, "--password-stdin:").replace(/^username:/, "--username:"));
  return credentials;
}

/** The entry `set` makes, checked as the curator will check it. */
export function registryEntry(host: string, flags: RegistryFlags, readStdin: () => string, readFile: (path: string) => string = (p) => readFileSync(p, "utf8")): ContainerRegistry {
  let caPem = "";
  if (flags.ca !== undefined) {
    try {
      caPem = readFile(flags.ca);
    } catch (err) {
      throw new UsageError(`--ca: cannot read ${flags.ca}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
    }
    const parsed = parseCaPem(caPem);
    if (typeof parsed === "string") throw new UsageError(`--ca: ${flags.ca} ${parsed}`);
  }
  const credentials = registryCredentials(flags, readStdin);
  const entry = create(ContainerRegistrySchema, {
    host: registryHost(host),
    mirrors: [...flags.mirrors],
    upstreamDisabled: flags.noUpstream,
    caPem,
    skipVerify: flags.skipVerify,
    peersDisabled: flags.noPeers === true,
    ...(credentials ? { credentials } : {}),
  });
  const problem = registryProblem(entry);
  if (problem) {
    const flag = problem.replace(/^mirrors\[(\d+)\]:/, (_, i: string) => `--mirror ${Number(i) + 1}:`).replace(/^upstream_disabled:/, "--mirrors-only:");
    throw new UsageError(flag);
  }
  return entry;
}

/** The listing for people: one row per host; skip-verify always shown. */
export function registryTable(registries: readonly ContainerRegistryShown[]): string {
  if (registries.length === 0) return "no registry configured: every image is pulled from its own host, anonymously (or with the pod's imagePullSecrets)";
  const rows = [
    ["HOST", "MIRRORS", "UPSTREAM", "PEERS", "CA", "VERIFY", "LOGIN"],
    ...registries.map((r) => [
      r.host,
      r.mirrors.join(",") || "-",
      r.upstreamDisabled ? "off" : "last",
      r.peersDisabled ? "off" : "first",
      r.ca ? `${r.ca.split("\n").length} certificate${r.ca.includes("\n") ? "s" : ""}` : "-",
      r.skipVerify ? "SKIPPED (insecure)" : "yes",
      r.hasCredentials ? r.username || "(token)" : "-",
    ]),
  ];
  return alignColumns(rows).join("\n");
}
