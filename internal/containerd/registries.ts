// How the cluster's registry configuration (api ContainerRegistry, set by
// the owner with `ctl cluster registry`, held by the curator) becomes
// containerd's per-host configuration: one directory per registry host
// below CRI's config_path, with a hosts.toml and the host's CA file.
//
//   ContainerRegistry{host, mirrors, upstream_disabled, ca_pem, skip_verify}
//        │ registryProblem: what containerd could not take, refused before
//        │ anything is stored (the curator) or sent (ctl)
//        ▼
//   <hostsDir>/<host>/hosts.toml   the peer mirror first (pull only; not
//   <hostsDir>/<host>/ca.pem       with peers_disabled), then the mirrors as
//                                  [host."…"] in order, the host itself last
//                                  as `server` (or, with the upstream off,
//                                  the last mirror in its place)
//   <hostsDir>/_default/hosts.toml the peer mirror alone, for every host the
//                                  configuration does not name
//
// containerd reads a host's directory at every pull (its config_path), so
// a change applies to the next pull: nothing restarts. Credentials are not
// written here: they go to the kubelet's credential provider
// (internal/kubernetes/registry_credentials.ts), which hands them to
// containerd with each pull, so they work with token-authenticating
// registries too, and the kubelet offers a pod's imagePullSecrets beside them.

import { X509Certificate } from "node:crypto";
import { mkdirSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { isIP } from "node:net";
import type { ContainerRegistry, RegistryCredentials } from "../../proto/gen/common/common_pb.ts";
import { firstUnprintable, quote } from "../rpc/mod.ts";
import { PEER_TOKEN_HEADER, type PeerMirrorEndpoint } from "./peer_mirror.ts";

/** Bounds on what the owner may set: hosts, mirrors per host, and each field. */
export const MAX_REGISTRIES = 64;
export const MAX_MIRRORS = 8;
export const MAX_REGISTRY_HOST_CHARS = 260;
export const MAX_HOST_PARTS = 6;
export const MAX_MIRROR_URL_CHARS = 512;
export const MAX_CA_PEM_BYTES = 64 * 1024;
export const MAX_CA_CERTIFICATES = 16;
export const MAX_USERNAME_CHARS = 256;
/** Access tokens (JWTs among them) are taken as the password, so it may be long. */
export const MAX_PASSWORD_CHARS = 8192;

/** The hosts.toml of a host, and its CA file, in the host's directory. */
export const HOSTS_TOML = "hosts.toml";
export const CA_FILE = "ca.pem";
/** containerd's directory for every host without one of its own. */
export const DEFAULT_HOST_DIR = "_default";

const LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?";
/** A DNS name or an IPv4 address, lower case, with an optional port: how image names spell a registry. */
const HOST = new RegExp(`^(${LABEL}(?:\\.${LABEL})*)(?::(\\d{1,5}))?$`);

/** Whether a value holds a control, format or separator character, or a lone surrogate. */
const unprintable = (value: string) => firstUnprintable(value) !== undefined;

/** Why `host` is not a registry host as image names spell it; undefined if it is one. */
export function registryHostProblem(host: string): string | undefined {
  if (host.length === 0) return "is empty";
  if (host.length > MAX_REGISTRY_HOST_CHARS) return `${host.length} characters, more than ${MAX_REGISTRY_HOST_CHARS}`;
  const match = HOST.exec(host);
  if (!match) {
    const hint = host.includes("://")
      ? " (a host, not a URL: registry.example.com or 10.0.0.5:5000)"
      : host !== host.toLowerCase()
        ? " (image names spell hosts in lower case)"
        : " (a DNS name or IPv4 address, with a port if it has one)";
    return `${quote(host)} is not a registry host${hint}`;
  }
  const [, name = "", port] = match;
  if (name.length > 253) return `${quote(host)}: the name is ${name.length} characters, more than 253`;
  // The kubelet's credential provider patterns match up to six name parts (internal/kubernetes/registries.ts).
  if (name.split(".").length > MAX_HOST_PARTS) return `${quote(host)}: ${name.split(".").length} name parts, more than the ${MAX_HOST_PARTS} the kubelet matches logins for`;
  if (port !== undefined && (Number(port) < 1 || Number(port) > 65535 || port.startsWith("0"))) return `${quote(host)}: port ${port} is not 1 to 65535`;
  if (/^[\d.]+$/.test(name) && isIP(name) !== 4) return `${quote(host)} is not an IPv4 address`;
  return undefined;
}

/** Why `url` is not a mirror's URL; undefined if it is one. */
export function mirrorUrlProblem(url: string): string | undefined {
  if (url.length > MAX_MIRROR_URL_CHARS) return `${url.length} characters, more than ${MAX_MIRROR_URL_CHARS}`;
  if (unprintable(url) || /\s/.test(url)) return `${quote(url)} holds a space or an unprintable character`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return `${quote(url)} is not a URL (for example https://mirror.example.com or http://10.0.0.9:5000)`;
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") return `${quote(url)}: the scheme is ${quote(parsed.protocol.replace(/:$/, ""), 16)}; use https or http`;
  if (parsed.username || parsed.password) return `${quote(parsed.origin)}: no user or password in a URL (it would be shown in listings); use ctl cluster registry login`;
  if (parsed.search || url.includes("?")) return `${quote(url)} has a query; a mirror is a scheme, a host and a path`;
  if (parsed.hash || url.includes("#")) return `${quote(url)} has a fragment; a mirror is a scheme, a host and a path`;
  const host = parsed.port ? `${parsed.hostname}:${parsed.port}` : parsed.hostname;
  const problem = registryHostProblem(host);
  if (problem) return `${quote(url)}: its host ${problem.replace(/^'[^']*' /, "")}`;
  return undefined;
}

/** The certificates of a PEM bundle, or why it is not one. */
export function parseCaPem(pem: string): X509Certificate[] | string {
  if (Buffer.byteLength(pem) > MAX_CA_PEM_BYTES) return `${Buffer.byteLength(pem)} bytes, more than ${MAX_CA_PEM_BYTES}`;
  const blocks = pem.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0) return "holds no PEM certificate (-----BEGIN CERTIFICATE-----)";
  if (blocks.length > MAX_CA_CERTIFICATES) return `${blocks.length} certificates, more than ${MAX_CA_CERTIFICATES}`;
  const rest = blocks.reduce((text, block) => text.replace(block, ""), pem);
  if (rest.trim() !== "") return "holds something besides PEM certificates (a key, or text)";
  const certificates: X509Certificate[] = [];
  for (const [index, block] of blocks.entries()) {
    try {
      certificates.push(new X509Certificate(block));
    } catch {
      return `certificate ${index + 1} of ${blocks.length} does not parse`;
    }
  }
  return certificates;
}

/** Why `credentials` cannot be a registry login; undefined if they can. */
export function credentialsProblem(credentials: RegistryCredentials): string | undefined {
  const { username, password } = credentials;
  if (username.length > MAX_USERNAME_CHARS) return `username: ${username.length} characters, more than ${MAX_USERNAME_CHARS}`;
  if (unprintable(username) || username.includes(":")) return "username: holds ':' or an unprintable character";
  if (password.length === 0) return "password: is empty";
  if (password.length > MAX_PASSWORD_CHARS) return `password: ${password.length} characters, more than ${MAX_PASSWORD_CHARS}`;
  // Never quoted: it is a secret.
  if (unprintable(password)) return "password: holds an unprintable character";
  return undefined;
}

/** What is wrong with one entry, as "field: problem"; undefined if nothing. */
export function registryProblem(registry: ContainerRegistry): string | undefined {
  const host = registryHostProblem(registry.host);
  if (host) return `host: ${host}`;
  if (registry.mirrors.length > MAX_MIRRORS) return `mirrors: ${registry.mirrors.length}, more than ${MAX_MIRRORS}`;
  const seen = new Set<string>();
  for (const [index, mirror] of registry.mirrors.entries()) {
    const problem = mirrorUrlProblem(mirror);
    if (problem) return `mirrors[${index}]: ${problem}`;
    const normal = new URL(mirror).href.replace(/\/$/, "");
    if (seen.has(normal)) return `mirrors[${index}]: ${quote(mirror)} is listed twice`;
    seen.add(normal);
  }
  if (registry.upstreamDisabled && registry.mirrors.length === 0) return "upstream_disabled: with the host itself off, name at least one mirror";
  if (registry.caPem) {
    const parsed = parseCaPem(registry.caPem);
    if (typeof parsed === "string") return `ca_pem: ${parsed}`;
  }
  if (registry.credentials) {
    const problem = credentialsProblem(registry.credentials);
    if (problem) return `credentials.${problem}`;
  }
  return undefined;
}

/** A TOML basic string. */
const toml = (value: string): string => JSON.stringify(value);

/**
 * The peer mirror's entry (peer_mirror.ts): pulls by digest only, never
 * resolves a tag, and carries the boot's token. Plain HTTP on loopback;
 * the proxy's own calls to the peers are mutual TLS.
 */
function peerMirrorHost(peer: PeerMirrorEndpoint): string[] {
  return [`[host.${toml(peer.url)}]`, '  capabilities = ["pull"]', `  dial_timeout = "1s"`, `  [host.${toml(peer.url)}.header]`, `    ${PEER_TOKEN_HEADER} = ${toml(peer.token)}`];
}

/**
 * The hosts.toml of one registry host: the peer mirror first when `peer`
 * is given and the host does not turn peers off, then its mirrors in
 * order, each for pull and resolve, then the host itself as the server
 * (containerd's own default for it: https://<host>, registry-1.docker.io
 * for docker.io), or, with the upstream off, the last mirror as the
 * server. The CA and skip_verify apply to the mirrors and the host.
 * `caPath`: the host's CA file, if it has a CA.
 */
export function hostsToml(registry: ContainerRegistry, caPath?: string, peer?: PeerMirrorEndpoint): string {
  const tls = [...(caPath ? [`ca = ${toml(caPath)}`] : []), ...(registry.skipVerify ? ["skip_verify = true"] : [])];
  const mirrors = registry.upstreamDisabled ? registry.mirrors.slice(0, -1) : registry.mirrors;
  const server = registry.upstreamDisabled ? registry.mirrors.at(-1) : undefined;
  const lines = [
    `# ${registry.host}: written by nodecore from the cluster's registry configuration`,
    "# (ctl cluster registry); every change there replaces this file.",
    ...(server ? [`server = ${toml(server)}`, 'capabilities = ["pull", "resolve"]'] : []),
    ...tls,
  ];
  if (peer && !registry.peersDisabled) lines.push("", ...peerMirrorHost(peer));
  for (const mirror of mirrors) {
    lines.push("", `[host.${toml(mirror)}]`, '  capabilities = ["pull", "resolve"]', ...tls.map((line) => `  ${line}`));
  }
  return lines.join("\n") + "\n";
}

/** The hosts.toml for every host the configuration does not name: the peer mirror, then the host itself. */
export function defaultHostsToml(peer: PeerMirrorEndpoint): string {
  return (
    ["# Every registry host without a directory of its own: written by nodecore.", "# The peer mirror first; then the host itself, containerd's default.", "", ...peerMirrorHost(peer)].join("\n") +
    "\n"
  );
}

/** The files of every host's directory, by path relative to the hosts directory; with `peer`, the default host's too. */
export function registryHostsFiles(hostsDir: string, registries: readonly ContainerRegistry[], peer?: PeerMirrorEndpoint): Map<string, string> {
  const files = new Map<string, string>();
  for (const registry of registries) {
    const caPath = registry.caPem ? `${hostsDir}/${registry.host}/${CA_FILE}` : undefined;
    if (caPath) files.set(`${registry.host}/${CA_FILE}`, registry.caPem.endsWith("\n") ? registry.caPem : `${registry.caPem}\n`);
    files.set(`${registry.host}/${HOSTS_TOML}`, hostsToml(registry, caPath, peer));
  }
  if (peer) files.set(`${DEFAULT_HOST_DIR}/${HOSTS_TOML}`, defaultHostsToml(peer));
  return files;
}

/**
 * Makes `hostsDir` hold exactly the hosts' directories of `registries`:
 * each file is written beside its place and renamed over it (a pull that
 * reads it meanwhile sees the old file or the new one, never half of
 * one), the CA before the hosts.toml that names it; directories of hosts
 * no longer configured are removed, and the default host's without `peer`.
 * Returns the hosts written.
 */
export function writeRegistryHosts(hostsDir: string, registries: readonly ContainerRegistry[], peer?: PeerMirrorEndpoint): string[] {
  mkdirSync(hostsDir, { recursive: true, mode: 0o700 });
  const files = registryHostsFiles(hostsDir, registries, peer);
  const hosts = new Set(registries.map((r) => r.host));
  // CA files first: a hosts.toml never names a CA file that is not there yet.
  const ordered = [...files].sort(([a], [b]) => Number(a.endsWith(HOSTS_TOML)) - Number(b.endsWith(HOSTS_TOML)));
  for (const [relative, content] of ordered) {
    const path = join(hostsDir, relative);
    mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
    const temporary = `${path}.new`;
    writeFileSync(temporary, content, { mode: 0o600 });
    renameSync(temporary, path);
  }
  for (const host of hosts) {
    // A CA the owner took away goes with it.
    if (!files.has(`${host}/${CA_FILE}`)) rmSync(join(hostsDir, host, CA_FILE), { force: true });
  }
  for (const entry of readdirSync(hostsDir)) {
    if (entry === DEFAULT_HOST_DIR && peer) continue;
    if (!hosts.has(entry)) rmSync(join(hostsDir, entry), { recursive: true, force: true });
  }
  return [...hosts];
}
