// A real container registry for the cluster network and the tests:
// Debian's docker-registry (the CNCF distribution registry, 2.8), with TLS
// from a CA of its own (made here, Ed25519, as every key of the project)
// and htpasswd authentication (bcrypt). Images go in with Debian's skopeo,
// from the OCI tarballs that image/oci.ts writes.
//
//   <dir>/registry.yml   the registry's configuration
//   <dir>/ca.crt         the CA a client must trust (ctl cluster registry set --ca)
//   <dir>/server.crt|key its serving certificate, for the address it listens on
//   <dir>/htpasswd       one user, bcrypt
//   <dir>/data/          what was pushed
//   <dir>/registry.log   what it said
//
// Stand-in for nothing: this is the registry a user would run on their
// own network, started by the launcher and the tests.

import type { Subprocess } from "bun";
import { closeSync, existsSync, mkdirSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { randomBytes } from "node:crypto";
import { join } from "node:path";
import { createCertificate, generateKeyPair, privateKeyPem, toPem, type CA } from "../../internal/pki/mod.ts";
import { runHostCommand, stopHostProcess } from "./host_command.ts";
import type { NetworkNamespace } from "./network_namespace.ts";
import { helloImage, HOST_BUSYBOX, readBusybox } from "../../image/mod.ts";

export const REGISTRY_BINARY = "/usr/bin/docker-registry";
export const SKOPEO_BINARY = "/usr/bin/skopeo";
const STOP_GRACE_MS = 5_000;
const READY_TIMEOUT_MS = 30_000;

export interface RegistryOptions {
  /** Where it keeps its files. */
  dir: string;
  /** The address it listens on (its certificate names it), and the port. */
  address: string;
  port: number;
  username: string;
  password: string;
  /** Runs argv (in the launcher's namespace, or on the host); stdout and stderr go to the log file descriptor. */
  spawn?: (argv: string[], log: number) => Subprocess;
}

/** A CA for the registry: a certificate and its key. */
function registryCA(): CA {
  const key = generateKeyPair();
  const certificate = createCertificate({ commonName: "nodecore test registry CA", kind: "ca", publicKey: key.publicKey }, { privateKey: key.privateKey });
  return { certificate, privateKey: key.privateKey };
}

/** The registry's configuration (distribution 2.x). */
export function registryConfig(options: Pick<RegistryOptions, "dir" | "address" | "port">): string {
  return [
    "version: 0.1",
    "log:",
    "  level: info",
    "  accesslog:",
    "    disabled: false",
    "storage:",
    "  filesystem:",
    `    rootdirectory: ${join(options.dir, "data")}`,
    "  delete:",
    "    enabled: true",
    "http:",
    `  addr: ${options.address}:${options.port}`,
    "  tls:",
    `    certificate: ${join(options.dir, "server.crt")}`,
    `    key: ${join(options.dir, "server.key")}`,
    "auth:",
    "  htpasswd:",
    "    realm: nodecore",
    `    path: ${join(options.dir, "htpasswd")}`,
    "",
  ].join("\n");
}

export class ContainerRegistryServer {
  private constructor(
    readonly options: RegistryOptions,
    /** The CA that signs its certificate, as PEM. */
    readonly caPem: string,
    private child: Subprocess,
  ) {}

  /** host:port, as image names spell it. */
  get host(): string {
    return `${this.options.address}:${this.options.port}`;
  }

  get caFile(): string {
    return join(this.options.dir, "ca.crt");
  }

  get logFile(): string {
    return registryLog(this.options.dir);
  }

  static async start(options: RegistryOptions): Promise<ContainerRegistryServer> {
    mkdirSync(join(options.dir, "data"), { recursive: true });
    // skopeo's view of the registry: its CA in a certificate directory (push).
    mkdirSync(join(options.dir, "certs.d"), { recursive: true });
    const ca = registryCA();
    const key = generateKeyPair();
    const isAddress = /^[\d.]+$/.test(options.address);
    const server = createCertificate(
      { commonName: options.address, kind: "server", publicKey: key.publicKey, ...(isAddress ? { ipAddresses: [options.address] } : { dnsNames: [options.address] }) },
      ca,
    );
    const caPem = toPem(ca.certificate);
    writeFileSync(join(options.dir, "ca.crt"), caPem);
    writeFileSync(join(options.dir, "certs.d", "ca.crt"), caPem);
    writeFileSync(join(options.dir, "server.crt"), toPem(server));
    writeFileSync(join(options.dir, "server.key"), privateKeyPem(key.privateKey), { mode: 0o600 });
    writeFileSync(join(options.dir, "htpasswd"), `${options.username}:${await Bun.password.hash(options.password, { algorithm: "bcrypt", cost: 5 })}\n`, { mode: 0o600 });
    writeFileSync(join(options.dir, "registry.yml"), registryConfig(options));
    const from = logLength(options);
    const registry = new ContainerRegistryServer(options, caPem, spawnRegistry(options));
    await registry.waitServing(from);
    return registry;
  }

  /**
   * Until its log says it listens (it may run in a network namespace that
   * this process cannot reach, so the log is what is read).
   */
  private async waitServing(from: number): Promise<void> {
    const deadline = Date.now() + READY_TIMEOUT_MS;
    const listening = `listening on ${this.host}`;
    for (;;) {
      if (readFileSync(this.logFile, "utf8").slice(from).includes(listening)) return;
      if (this.child.exitCode !== null) throw new Error(`docker-registry exited (${this.child.exitCode}); see ${this.logFile}`);
      if (Date.now() > deadline) throw new Error(`docker-registry did not serve on ${this.host} within ${READY_TIMEOUT_MS / 1000} s; see ${this.logFile}`);
      await Bun.sleep(100);
    }
  }

  /**
   * Pushes an OCI tarball (an OCI image layout in a tar, as image/oci.ts
   * writes it) as <host>/<name>, with skopeo, trusting the registry's CA.
   * `run` runs skopeo where the registry can be reached (the namespace).
   */
  async push(tarball: string, name: string, run: (argv: string[]) => Promise<unknown> = (argv) => runHostCommand(argv)): Promise<string> {
    return pushToRegistry({ dir: this.options.dir, host: this.host, username: this.options.username, password: this.options.password }, tarball, name, run);
  }

  async stop(): Promise<void> {
    if (this.child.exitCode !== null || this.child.signalCode !== null) return;
    await stopHostProcess(this.child, STOP_GRACE_MS);
  }

  /** Starts it again on the same files (after stop): a registry that comes back. */
  async restart(): Promise<void> {
    await this.stop();
    const from = logLength(this.options);
    this.child = spawnRegistry(this.options);
    await this.waitServing(from);
  }

  stopSync(): void {
    try {
      this.child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }
}

/**
 * Pushes an OCI tarball as <host>/<name> with skopeo to the registry whose
 * files are in `dir` (its CA in dir/certs.d), with its login: what push
 * does, and what a tool does that finds a launched cluster's registry by
 * its directory (test/conformance). `run` runs skopeo where the registry
 * can be reached.
 */
export async function pushToRegistry(
  registry: { dir: string; host: string; username: string; password: string },
  tarball: string,
  name: string,
  run: (argv: string[]) => Promise<unknown> = (argv) => runHostCommand(argv),
): Promise<string> {
  const certs = join(registry.dir, "certs.d");
  // The login in a file of its own, not on skopeo's command line.
  const authFile = join(registry.dir, "auth.json");
  const auth = Buffer.from(`${registry.username}:${registry.password}`).toString("base64");
  writeFileSync(authFile, JSON.stringify({ auths: { [registry.host]: { auth } } }), { mode: 0o600 });
  const reference = `${registry.host}/${name}`;
  await run([SKOPEO_BINARY, "copy", "--quiet", "--dest-cert-dir", certs, "--authfile", authFile, `oci-archive:${tarball}`, `docker://${reference}`]);
  return reference;
}

/** Where the registry's output goes. */
function registryLog(dir: string): string {
  return join(dir, "registry.log");
}

/** The registry log's length now: what comes after is new. */
function logLength(options: Pick<RegistryOptions, "dir">): number {
  const log = registryLog(options.dir);
  return existsSync(log) ? readFileSync(log).length : 0;
}

function spawnRegistry(options: RegistryOptions): Subprocess {
  const log = openSync(registryLog(options.dir), "a");
  try {
    const argv = [REGISTRY_BINARY, "serve", join(options.dir, "registry.yml")];
    return options.spawn ? options.spawn(argv, log) : Bun.spawn(argv, { stdin: "ignore", stdout: log, stderr: log });
  } finally {
    closeSync(log);
  }
}

/** RegistryOptions.spawn for a registry in `ns`. */
export function spawnIn(ns: NetworkNamespace): NonNullable<RegistryOptions["spawn"]> {
  return (argv, log) => Bun.spawn(ns.command(argv), { stdin: "ignore", stdout: log, stderr: log });
}

/** Where the launcher's registry listens on the bridge, and the login it wants. */
export const CLUSTER_REGISTRY_PORT = 5000;
export const CLUSTER_REGISTRY_USER = "nodecore";
/** What the launcher pushes: a user's application (image/oci.ts helloImage, two layers), by name and tag. */
export const HELLO_REPOSITORY = "apps/hello";
export const HELLO_TAG = "1";

/**
 * The launcher's registry: on the bridge's address inside the cluster's
 * namespace, a password of its own per launch (<dir>/password, 0600), and
 * the hello image pushed, so that pods pull it by name once the owner set
 * the registry up (configureClusterRegistry).
 */
export async function startClusterRegistry(ns: NetworkNamespace, dir: string): Promise<ContainerRegistryServer> {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
  const password = randomBytes(16).toString("hex");
  writeFileSync(join(dir, "password"), `${password}\n`, { mode: 0o600 });
  const registry = await ContainerRegistryServer.start({
    dir,
    address: ns.subnet.bridgeAddress,
    port: CLUSTER_REGISTRY_PORT,
    username: CLUSTER_REGISTRY_USER,
    password,
    spawn: spawnIn(ns),
  });
  try {
    const tarball = join(dir, "hello.oci.tar");
    writeFileSync(tarball, helloImage(readBusybox(HOST_BUSYBOX), `${registry.host}/${HELLO_REPOSITORY}:${HELLO_TAG}`));
    await registry.push(tarball, `${HELLO_REPOSITORY}:${HELLO_TAG}`, (argv) => ns.run(argv));
  } catch (err) {
    await registry.stop();
    throw err;
  }
  return registry;
}

/**
 * What an owner runs to let the cluster pull from the launcher's registry:
 * `ctl cluster registry set <host> --ca <its CA> --username nodecore
 * --password-stdin`, the password piped in. Returns ctl's result.
 */
export function configureClusterRegistry(registry: ContainerRegistryServer, ctl: (args: string[], stdin: string) => Promise<{ exitCode: number; stdout: string; stderr: string }>) {
  return ctl(["cluster", "registry", "set", registry.host, "--ca", registry.caFile, "--username", registry.options.username, "--password-stdin"], `${registry.options.password}\n`);
}
