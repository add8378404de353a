// Pulling a user's image from a private registry, end to end on this host
// but for the kubelet (which needs cgroup v2: the qemu e2e runs it):
//
//   owner ── Management.SetContainerRegistry ──▶ a real curator (etcd)
//   worker's registriesService ◀── Curator.WatchContainerRegistries (as a worker node)
//        ├── hosts.toml + CA below CRI's config_path
//        └── the credentials file
//   `out/init registry-credentials <file>` (the kubelet's credential provider,
//        the built binary) ── its answer ──▶ CRI PullImage, as the kubelet
//        sends it ──▶ the built containerd ──▶ Debian's docker-registry
//        (TLS from its own CA, htpasswd)
//
// What the kubelet would show in `kubectl describe pod` is CRI's error
// message, checked here for each cause: an unknown CA, no login, a wrong
// password. Every change applies to the next pull with the same containerd.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { create } from "@bufbuild/protobuf";
import { existsSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import type { Subprocess } from "bun";
import { Management } from "../proto/gen/api/management_pb.ts";
import { Curator } from "../proto/gen/curator/curator_pb.ts";
import type { ContainerRegistry } from "../proto/gen/common/common_pb.ts";
import type { RuntimePaths } from "../internal/containerd/mod.ts";
import { enrolNode, ownerOf, startTestCluster, type TestCluster } from "../internal/curator/test_cluster.ts";
import { Value } from "../internal/event/mod.ts";
import { captureLogger } from "../internal/log/mod.ts";
import { registriesService, REGISTRY_FILES } from "../internal/kubernetes/mod.ts";
import { supervise, untilCancelled, type Supervisor } from "../internal/supervisor/mod.ts";
import { eventually, freePorts, tempDir } from "../internal/testing/mod.ts";
import { helloImage, HOST_BUSYBOX, readBusybox } from "../image/mod.ts";
import { ContainerRegistryServer, spawnIn } from "./launch/registry.ts";
import { NetworkNamespace, NAMESPACE_PREFIX, subnetOf } from "./launch/network_namespace.ts";
import { runHostCommand } from "./launch/host_command.ts";
import { startCriContainerd, type CriImages } from "./support/cri.ts";

const dir = tempDir("nodecore-registry-");
const PASSWORD = "pw-4Tq-registry";
const INIT = join(import.meta.dir, "..", "out", "init");

let ns: NetworkNamespace;
let cluster: TestCluster;
let owner: Awaited<ReturnType<typeof ownerOf>>;
let registry: ContainerRegistryServer;
let containerd: Subprocess;
let cri: CriImages;
let service: Supervisor;
/** The pushed image's ID (its configuration's digest), as CRI names what it pulled. */
let imageId: string;
let runtime: Awaited<ReturnType<typeof startCriContainerd>>;
let paths: RuntimePaths;
const kubeletDir = join(dir.path, "kubelet");
const stopStream = new AbortController();

beforeAll(async () => {
  const [registryPort, deadPort] = freePorts(2) as [number, number];
  // containerd treats a loopback registry as trusted without a CA (its
  // localhost rule), so the registry and containerd share a network of
  // their own, where the registry has an address like any other.
  ns = await NetworkNamespace.create(`${NAMESPACE_PREFIX}registry-${process.pid}`, subnetOf(201));
  const address = ns.subnet.bridgeAddress;
  cluster = await startTestCluster();
  owner = await ownerOf(cluster);
  const worker = await enrolNode(cluster, owner);
  const management = cluster.client(Management, owner);
  await management.updateNodeRoles({ id: worker.id, kubernetesWorker: true });
  management.close();

  registry = await ContainerRegistryServer.start({
    dir: join(dir.path, "registry"),
    address,
    port: registryPort,
    username: "alice",
    password: PASSWORD,
    spawn: spawnIn(ns),
  });
  const tarball = join(dir.path, "hello.oci.tar");
  writeFileSync(tarball, helloImage(readBusybox(HOST_BUSYBOX), "nodecore.test/hello:1"));
  await registry.push(tarball, "apps/hello:1", (argv) => ns.run(argv));
  // What CRI answers a pull with: the image's ID, its configuration's digest (in the manifest the index names).
  const member = async (path: string) => JSON.parse((await runHostCommand(["tar", "-xOf", tarball, path])).stdout) as Record<string, unknown>;
  const manifest = (await member("index.json")) as { manifests: { digest: string }[] };
  imageId = ((await member(`blobs/sha256/${manifest.manifests[0]!.digest.slice("sha256:".length)}`)) as { config: { digest: string } }).config.digest;
  deadMirror = `https://${address}:${deadPort}`;

  runtime = await startCriContainerd(ns, join(dir.path, "containerd"), "nodecore-registry-test");
  paths = runtime.paths;
  cri = runtime.images;
  containerd = runtime.process;

  // The worker's side, as the role server runs it: the curator's stream into a value, the service writing files from it.
  const registries = new Value<readonly ContainerRegistry[]>();
  const curator = cluster.client(Curator, worker);
  void (async () => {
    for await (const message of curator.watchContainerRegistries({}, { signal: stopStream.signal })) registries.set(message.registries);
  })().catch(() => {});
  const { logger } = captureLogger("root");
  service = supervise(
    async (ctx) => {
      ctx.run("registries", registriesService({ hostsDir: paths.registryHosts, kubeletDir, registries, report: () => {} }));
      await untilCancelled(ctx.signal);
    },
    { logger },
  );
  await eventually(() => expect(existsSync(join(kubeletDir, REGISTRY_FILES.credentials))).toBe(true), { timeoutMs: 30_000, what: "the first registry configuration applied" });
}, 180_000);

afterAll(async () => {
  stopStream.abort();
  await service?.stop();
  await runtime?.stop();
  await registry?.stop();
  await ns?.destroy();
  await cluster?.close();
  dir[Symbol.dispose]();
}, 60_000);

let deadMirror = "";

/** What the kubelet's credential provider (the built node binary) answers for `image`. */
async function providerLogin(image: string): Promise<{ username: string; password: string } | undefined> {
  const child = Bun.spawn([INIT, "registry-credentials", join(kubeletDir, REGISTRY_FILES.credentials)], { stdin: "pipe", stdout: "pipe", stderr: "pipe" });
  child.stdin.write(JSON.stringify({ apiVersion: "credentialprovider.kubelet.k8s.io/v1", kind: "CredentialProviderRequest", image }));
  await child.stdin.end();
  const [out, err, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  if (code !== 0) throw new Error(`the credential provider exited ${code}: ${err}`);
  const answer = JSON.parse(out) as { cacheDuration: string; auth: Record<string, { username: string; password: string }> };
  expect(answer.cacheDuration).toBe("0s");
  return Object.values(answer.auth)[0];
}

/** A pull as the kubelet makes it: its provider's login, then CRI PullImage; the error message is what `kubectl describe pod` shows. */
async function pull(image: string): Promise<{ ref?: string; error?: string }> {
  await cri.remove(image).catch(() => {});
  try {
    return { ref: await cri.pull(image, await providerLogin(image)) };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

/** Waits until the worker's files say `check`. */
async function applied(check: (credentials: string, hosts: (host: string) => string) => boolean, what: string): Promise<void> {
  const hosts = (host: string) => {
    try {
      return readFileSync(join(paths.registryHosts, host, "hosts.toml"), "utf8");
    } catch {
      return "";
    }
  };
  await eventually(() => expect(check(readFileSync(join(kubeletDir, REGISTRY_FILES.credentials), "utf8"), hosts)).toBe(true), { timeoutMs: 30_000, what });
}

describe("a private registry with its own CA and a password", () => {
  test("unknown to the cluster, its certificate is refused; configured by the owner, the image is pulled by name", async () => {
    const image = `${registry.host}/apps/hello:1`;
    const before = await pull(image);
    expect(before.error).toContain("certificate signed by unknown authority");

    const management = cluster.client(Management, owner);
    await management.setContainerRegistry({ registry: { host: registry.host, caPem: registry.caPem, credentials: { username: "alice", password: PASSWORD } } });
    management.close();
    await applied((credentials, hosts) => credentials.includes(registry.host) && hosts(registry.host).includes("ca ="), "the CA and the login on the worker");

    const after = await pull(image);
    expect(after).toEqual({ ref: imageId });
    expect(imageId).toStartWith("sha256:");
  }, 120_000);

  test("a wrong password shows 401 Unauthorized, no login 'no basic auth credentials'; each change applies to the next pull, containerd never restarted", async () => {
    const image = `${registry.host}/apps/hello:1`;
    const pid = containerd.pid;
    const management = cluster.client(Management, owner);
    try {
      await management.setContainerRegistryCredentials({ host: registry.host, credentials: { username: "alice", password: "not-the-password" } });
      await applied((credentials) => credentials.includes("not-the-password"), "the wrong password on the worker");
      expect((await pull(image)).error).toContain("401 Unauthorized");

      await management.setContainerRegistryCredentials({ host: registry.host });
      await applied((credentials) => !credentials.includes("alice"), "no login on the worker");
      expect((await pull(image)).error).toContain("no basic auth credentials");

      await management.setContainerRegistryCredentials({ host: registry.host, credentials: { username: "alice", password: PASSWORD } });
      await applied((credentials) => credentials.includes(PASSWORD), "the login back on the worker");
      expect(await pull(image)).toEqual({ ref: imageId });
    } finally {
      management.close();
    }
    expect(containerd.pid).toBe(pid);
    expect(containerd.exitCode).toBeNull();
  }, 120_000);

  test("mirrors: the first one down, the image comes from the second; with the upstream off, the host itself is never asked", async () => {
    // A host that exists nowhere: only its mirrors can answer for it.
    const host = "images.example.invalid";
    const management = cluster.client(Management, owner);
    await management.setContainerRegistry({
      registry: { host, mirrors: [deadMirror, `https://${registry.host}`], upstreamDisabled: true, caPem: registry.caPem, credentials: { username: "alice", password: PASSWORD } },
    });
    management.close();
    await applied((credentials, hosts) => credentials.includes(host) && hosts(host).includes(deadMirror), "the mirrors on the worker");
    const from = readFileSync(registry.logFile, "utf8").length;
    expect(await pull(`${host}/apps/hello:1`)).toEqual({ ref: imageId });
    // The mirror was asked on behalf of the host (containerd's ns parameter).
    expect(readFileSync(registry.logFile, "utf8").slice(from)).toContain(`ns=${host}`);
  }, 120_000);

  test("the worker's files: the login only in the credentials file (0600), never in hosts.toml", () => {
    const credentialsFile = join(kubeletDir, REGISTRY_FILES.credentials);
    expect(statSync(credentialsFile).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(paths.registryHosts, registry.host, "hosts.toml"), "utf8")).not.toContain(PASSWORD);
    expect(readFileSync(credentialsFile, "utf8")).toContain(PASSWORD);
  });
});
