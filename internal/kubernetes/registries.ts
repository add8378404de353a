// A worker's share of the cluster's registry configuration (set with
// `ctl cluster registry`, held by the curator: internal/curator/registries.ts):
// containerd's hosts.toml per registry host, and the credentials the
// kubelet hands containerd with each pull.
//
//   curator WatchContainerRegistries ──▶ registriesService (one per worker)
//        ├── writeRegistryHosts (internal/containerd): mirrors, CA, verification
//        └── <kubelet dir>/registry-credentials.json (0600, tmpfs): user and
//            password per host
//
//   kubelet ── pull of <host>/<repo> ──▶ its credential provider: the node's
//        own binary, `init registry-credentials <file>` (credentialResponse),
//        which answers with the host's login, cached for 0 s ──▶ CRI
//        PullImage(auth) ──▶ containerd offers it to whichever of the
//        host's endpoints (mirror or host) asks for credentials
//
// Why the kubelet's credential provider and not containerd's: containerd
// 2.x takes static credentials only from its config.toml (a restart to
// change them, and deprecated), or as a fixed header in hosts.toml (which
// token-authenticating registries such as Docker Hub do not accept). A
// credential provider's answer is asked for at every pull (cache duration
// 0), so a change applies to the next pull, works with token and basic
// authentication alike, and sits beside a pod's own imagePullSecrets,
// which the kubelet tries too.

import { mkdirSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import type { ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import { writeRegistryHosts, type PeerMirrorEndpoint } from "../containerd/mod.ts";
import type { Value } from "../event/mod.ts";
import type { Runnable } from "../supervisor/mod.ts";
import type { ComponentState } from "./component.ts";
import { writePrivateFiles } from "./private_files.ts";

/** The kubelet's name for the provider: the executable's name in its bin directory. */
export const CREDENTIAL_PROVIDER_NAME = "nodecore-registry-credentials";
/** The node binary's argument that makes it answer as the credential provider (cmd/init). */
export const CREDENTIAL_PROVIDER_COMMAND = "registry-credentials";
const PROVIDER_API = "credentialprovider.kubelet.k8s.io/v1";

/** The files in the kubelet's directory (tmpfs). */
export const REGISTRY_FILES = {
  providerConfig: "credential-providers.json",
  providerBinDir: "credential-providers",
  credentials: "registry-credentials.json",
} as const;

/**
 * Images the provider is asked about: any host of up to six name parts.
 * Whether there is a login for the host is the provider's answer, so that
 * a host the owner adds later needs no new kubelet configuration, but for
 * one thing: the kubelet matches a pattern's port exactly (a pattern
 * without one matches only images without one; pkg/credentialprovider
 * URLsMatch), and it reads the patterns only when it starts. So the
 * patterns cover the ports registries commonly use and every port the
 * cluster's configuration names when the kubelet starts; a host on
 * another port, set later, restarts the kubelet once (service_kubelet.ts;
 * its pods keep running).
 */
const MATCH_ANY = ["*", "*.*", "*.*.*", "*.*.*.*", "*.*.*.*.*", "*.*.*.*.*.*"];
export const COMMON_REGISTRY_PORTS: readonly number[] = [443, 5000, 5001, 8080, 8443];

/** The ports the registry hosts of `registries` name (registry.example.com:5000 → 5000). */
export function registryPorts(registries: readonly ContainerRegistry[]): number[] {
  const ports = registries
    .map((r) => /:(\d+)$/.exec(r.host)?.[1])
    .filter((p): p is string => p !== undefined)
    .map(Number);
  return [...new Set(ports)].sort((a, b) => a - b);
}

/** The ports the provider's patterns cover for `registries`: the common ones and theirs. */
export function providerPorts(registries: readonly ContainerRegistry[]): number[] {
  return [...new Set([...COMMON_REGISTRY_PORTS, ...registryPorts(registries)])].sort((a, b) => a - b);
}

/** The kubelet's --image-credential-provider-config (JSON, which it reads as YAML), covering hosts without a port and on `ports`. */
export function credentialProviderConfig(credentialsFile: string, ports: readonly number[] = COMMON_REGISTRY_PORTS): Record<string, unknown> {
  return {
    apiVersion: "kubelet.config.k8s.io/v1",
    kind: "CredentialProviderConfig",
    providers: [
      {
        name: CREDENTIAL_PROVIDER_NAME,
        matchImages: [...MATCH_ANY, ...ports.flatMap((port) => MATCH_ANY.map((pattern) => `${pattern}:${port}`))],
        // Asked at every pull: a changed login applies to the next one.
        defaultCacheDuration: "0s",
        apiVersion: PROVIDER_API,
        args: [CREDENTIAL_PROVIDER_COMMAND, credentialsFile],
      },
    ],
  };
}

/** The kubelet flags that enable the provider, with its files in `dir`. */
export function credentialProviderArgs(dir: string): string[] {
  return [`--image-credential-provider-config=${join(dir, REGISTRY_FILES.providerConfig)}`, `--image-credential-provider-bin-dir=${join(dir, REGISTRY_FILES.providerBinDir)}`];
}

interface Login {
  username: string;
  password: string;
}

/** The credentials file: the login of every host that has one. */
export function credentialsFile(registries: readonly ContainerRegistry[]): string {
  const hosts: Record<string, Login> = {};
  for (const r of registries) if (r.credentials) hosts[r.host] = { username: r.credentials.username, password: r.credentials.password };
  return JSON.stringify({ hosts }) + "\n";
}

/**
 * The registry host of an image reference, as containerd resolves it: the
 * first path component when it looks like a host (a '.', a ':', or
 * "localhost"), docker.io otherwise.
 */
export function imageHost(image: string): string {
  const slash = image.indexOf("/");
  if (slash < 0) return "docker.io";
  const first = image.slice(0, slash);
  return first.includes(".") || first.includes(":") || first === "localhost" ? first.toLowerCase() : "docker.io";
}

export class CredentialProviderError extends Error {
  override name = "CredentialProviderError";
}

/**
 * The provider's answer to the kubelet's request (JSON on its stdin): the
 * login of the image's host from `credentials` (the credentials file's
 * text; undefined when there is none), never cached; no auth at all when
 * the host has no login.
 */
export function credentialResponse(request: string, credentials: string | undefined): string {
  let parsed: { kind?: unknown; apiVersion?: unknown; image?: unknown };
  try {
    parsed = JSON.parse(request) as typeof parsed;
  } catch {
    throw new CredentialProviderError("the request on stdin is not JSON (a CredentialProviderRequest from the kubelet)");
  }
  if (parsed.kind !== "CredentialProviderRequest" || typeof parsed.image !== "string" || parsed.image.length === 0 || parsed.image.length > 4096) {
    throw new CredentialProviderError("the request on stdin is not a CredentialProviderRequest with an image");
  }
  const apiVersion = typeof parsed.apiVersion === "string" && parsed.apiVersion.startsWith("credentialprovider.kubelet.k8s.io/") ? parsed.apiVersion : PROVIDER_API;
  const host = imageHost(parsed.image);
  let logins: Record<string, Login> = {};
  if (credentials !== undefined) {
    try {
      logins = (JSON.parse(credentials) as { hosts?: Record<string, Login> }).hosts ?? {};
    } catch {
      throw new CredentialProviderError("the credentials file is not JSON");
    }
  }
  const login = Object.hasOwn(logins, host) ? logins[host] : undefined;
  return JSON.stringify({
    apiVersion,
    kind: "CredentialProviderResponse",
    cacheKeyType: "Registry",
    cacheDuration: "0s",
    auth: login ? { [host]: { username: login.username, password: login.password } } : {},
  });
}

/** cmd/init's `registry-credentials <file>`: reads the kubelet's request on stdin, answers on stdout. */
export async function runCredentialProvider(credentialsPath: string | undefined): Promise<number> {
  if (!credentialsPath) {
    console.error(`usage: init ${CREDENTIAL_PROVIDER_COMMAND} <credentials file>  (run by the kubelet, request on stdin)`);
    return 2;
  }
  try {
    const request = await new Response(Bun.stdin.stream()).text();
    let credentials: string | undefined;
    try {
      credentials = readFileSync(credentialsPath, "utf8");
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    }
    process.stdout.write(credentialResponse(request, credentials));
    return 0;
  } catch (err) {
    console.error(`${CREDENTIAL_PROVIDER_NAME}: ${(err as Error).message}`);
    return 1;
  }
}

/**
 * The credential provider's files in the kubelet's directory `dir`: its
 * configuration, and its bin directory with the node's own binary
 * (`binary`) under the provider's name, matching hosts on `ports`.
 * Written before the kubelet starts.
 */
export function writeCredentialProvider(dir: string, binary: string, ports: readonly number[] = COMMON_REGISTRY_PORTS): void {
  writePrivateFiles(dir, { providerConfig: REGISTRY_FILES.providerConfig }, { providerConfig: JSON.stringify(credentialProviderConfig(join(dir, REGISTRY_FILES.credentials), ports), null, 2) + "\n" });
  mkdirSync(join(dir, REGISTRY_FILES.providerBinDir), { recursive: true, mode: 0o700 });
  const link = join(dir, REGISTRY_FILES.providerBinDir, CREDENTIAL_PROVIDER_NAME);
  rmSync(link, { force: true });
  symlinkSync(binary, link);
}

export interface RegistriesServiceOptions {
  /** CRI's config_path (RuntimePaths.registryHosts). */
  hostsDir: string;
  /** The kubelet's directory (tmpfs): the credentials file goes there. */
  kubeletDir: string;
  /** Read: the cluster's registry configuration, as the curator's WatchContainerRegistries last sent it. */
  registries: Value<readonly ContainerRegistry[]>;
  /** The peer mirror, named first for every host that does not turn peers off (internal/containerd/peer_mirror.ts). */
  peer?: PeerMirrorEndpoint;
  report: (component: string, state: ComponentState, message: string) => void;
}

/** Follows the cluster's registry configuration into containerd's hosts and the kubelet's credentials file. */
export function registriesService(options: RegistriesServiceOptions): Runnable {
  return async (ctx) => {
    options.report("registries", "waiting", "for the cluster's registry configuration");
    using watcher = options.registries.watch();
    for (;;) {
      const registries = await watcher.get({ signal: ctx.signal });
      const hosts = writeRegistryHosts(options.hostsDir, registries, options.peer);
      writePrivateFiles(options.kubeletDir, { credentials: REGISTRY_FILES.credentials }, { credentials: credentialsFile(registries) });
      const logins = registries.filter((r) => r.credentials).length;
      ctx.logger.info("registry configuration applied", { hosts: hosts.join(",") || "none", logins });
      options.report("registries", "running", hosts.length ? `${hosts.length} registry hosts configured (${logins} with a login)` : "no registry configured: images are pulled from their hosts");
      ctx.signalHealthy();
    }
  };
}
