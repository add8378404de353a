// The kubelet on a worker node: once containerd answers, the node's
// kubelet key (kept on the data partition) gets fresh certificates from the
// curator, and the kubelet runs with them against an apiserver the cluster
// names. Healthy once its /healthz answers.
//
//   kubeletService
//     ├── waits for containerd (the CRI socket)
//     ├── issue(kubelet public key) ──▶ curator IssueKubeletCertificates
//     │       (server and client certificates, the CA, the apiservers)
//     │       (none named: no controller yet; asked again every APISERVER_LIST_WAIT_MS)
//     ├── the first of those apiservers that answers /readyz to the kubelet's identity,
//     │       asked again every APISERVER_WAIT_MS while none does (a controller
//     │       is often still starting when its workers come up), for at most
//     │       APISERVER_WAIT_BOUND_MS: then the service starts over and asks the
//     │       curator again, whose list of apiservers may have changed
//     ├── files on tmpfs: config, kubeconfig, certificates, key
//     ├── kubelet (in the runtime's cgroup, so role removal stops its pods too)
//     ├── kube-proxy beside it (proxy.ts: Services, nftables), as system:kube-proxy
//     ├── CoreDNS beside it (dns.ts: the cluster DNS), as nodecore:cluster-dns
//     ├── the NetworkPolicy enforcer (network_policy.ts), as nodecore:network-policy
//     ├── the volume provisioner (provisioner.ts), as nodecore:volumes:<node>
//     └── watches that apiserver: when it stops answering (APISERVER_MISSES
//         checks in a row) and another one answers, the service starts over
//         with that one, so a kubelet follows the controllers instead of
//         staying with a dead one; with no other answering it stays, since
//         starting over against the same one would only take Services and
//         DNS from the pods for a while (a busy apiserver is not a dead one)
//
// Status lines "kubelet", "kube-proxy", "cluster-dns" and "network-policy":
// waiting (for what), starting, running, restarting.

import { existsSync, mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { createPublicKey, type X509Certificate } from "node:crypto";
import { Value } from "../event/mod.ts";
import { writeFileDurably } from "../localstorage/mod.ts";
import { generateKeyPair, privateKeyFromRaw, rawPrivateKey, rawPublicKey } from "../pki/mod.ts";
import { RestartRequest, sleep, type Runnable } from "../supervisor/mod.ts";
import { answersOk, component, untilOk, type ComponentState } from "./component.ts";
import { KUBELET_HEALTHZ_PORT, kubeletArgs, kubeletFiles, KUBELET_FILES } from "./kubelet.ts";
import type { Credential } from "./pki.ts";
import { writePrivateFiles } from "./private_files.ts";
import { PROXY_FILES, proxyArgs, proxyFiles, proxyHealthz } from "./proxy.ts";
import { DNS_FILES, dnsArgs, dnsFiles, dnsReady } from "./dns.ts";
import { enableBridgeFilter, NETWORK_POLICY_FILES, networkPolicyArgs, networkPolicyFiles, networkPolicyReady } from "./network_policy.ts";
import { providerPorts, registryPorts, writeCredentialProvider } from "./registries.ts";
import type { ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import { provisionerService } from "./provisioner.ts";
import type { VolumeStore } from "./volume_store.ts";

/** The part of its certificates' remaining life after which the kubelet service asks for new ones (and restarts the kubelet with them). */
export const KUBELET_RENEW_FRACTION = 0.5;

/** How often the kubelet's apiserver is checked, and how many misses in a row mean choosing again. */
export const APISERVER_CHECK_MS = 5_000;
export const APISERVER_MISSES = 3;
/** How long one of those checks waits: a loaded apiserver (the controller is a worker too, under emulation) is slow, not gone. */
export const APISERVER_CHECK_TIMEOUT_MS = 5_000;
/**
 * How often the apiservers are asked again while none answers yet, and for
 * how long. The wait is the service's own, not a restart: the supervisor's
 * backoff grows to a minute (CI, 2026-11-27: node2's kubelet started 133 s
 * after node1's apiserver answered the owner, its last tries 34 and 60 s
 * apart).
 */
export const APISERVER_WAIT_MS = 3_000;
/** How often the curator is asked again while it names no apiserver at all (no controller yet). */
export const APISERVER_LIST_WAIT_MS = 10_000;
export const APISERVER_WAIT_BOUND_MS = 120_000;

export interface KubeletCertificates {
  ca: X509Certificate;
  server: X509Certificate;
  client: X509Certificate;
  /** kube-proxy's client certificate (system:kube-proxy) over the same key. */
  proxy: X509Certificate;
  /** The cluster DNS server's client certificate (nodecore:cluster-dns) over the same key. */
  dns: X509Certificate;
  /** The volume provisioner's client certificate (nodecore:volumes:<node>) over the same key. */
  volumes: X509Certificate;
  /**
   * The NetworkPolicy enforcer's client certificate (nodecore:network-policy)
   * over the same key; absent from a curator of an older version.
   */
  networkPolicy?: X509Certificate;
  /** https://address:6443 of the controllers, as the cluster has them. */
  apiservers: string[];
}

export interface KubeletServiceOptions {
  nodeId: string;
  address: string;
  binDir: string;
  /** tmpfs: the kubelet's files. */
  dir: string;
  /** The data partition: the kubelet's root directory. */
  rootDir: string;
  /** The kubelet's Ed25519 key seed, kept across boots (data partition). */
  keyFile: string;
  containerdSocket: string;
  /** Read: true while containerd answers. */
  containerdReady: Value<boolean>;
  /** The pods' cgroup parent, from the hierarchy's root. */
  cgroupRoot: string;
  /** The registry credential provider's executable: the node's own binary (cmd/init) unless a test says otherwise. */
  credentialProvider?: string;
  /** Read: the cluster's registry configuration (the ports its hosts name: the provider's patterns). */
  registries?: Value<readonly ContainerRegistry[]>;
  /** The kubelet's PATH (kubeletPath: its mount tools). */
  path?: string;
  /** Puts the kubelet process where it belongs (the runtime's cgroup). */
  onSpawn?: (pid: number) => void;
  /** Asks the cluster for the kubelet's certificates over this public key. */
  issue: (publicKey: Uint8Array, signal: AbortSignal) => Promise<KubeletCertificates>;
  report: (component: string, state: ComponentState, message: string) => void;
  /**
   * The cluster DNS server (dns.ts): where the coredns binary is, and the
   * node's own resolvers. Without it no DNS server runs.
   */
  dns?: { binDir: string; upstreams: readonly string[] };
  /**
   * The NetworkPolicy enforcer (network_policy.ts) beside the kubelet;
   * procSys is where the bridge's sysctls are (tests point it elsewhere).
   * Without it no policy is enforced on this node.
   */
  networkPolicy?: { binDir: string; procSys?: string };
  /** The node's volume store: its provisioner runs beside the kubelet, as the node's volumes identity. */
  volumes?: VolumeStore;
  /** The apiserver watch's timing (tests shorten it). */
  apiserverCheck?: { intervalMs: number; misses: number };
  /** The wait for a first apiserver to answer (tests shorten it). */
  apiserverWait?: { intervalMs: number; listIntervalMs: number; boundMs: number };
}

export class KubeletError extends Error {
  override name = "KubeletError";
}

/**
 * The first of `apiservers` whose /readyz answers "ok" to this identity
 * (the kubelet's own: what the kubelet will be), or undefined. Each is
 * given APISERVER_CHECK_TIMEOUT_MS: a loaded apiserver is slow, not gone.
 */
export async function chooseApiserver(apiservers: readonly string[], identity: { ca: X509Certificate; client: Credential }, signal?: AbortSignal): Promise<string | undefined> {
  for (const url of apiservers) if (await answersOk(`${url}/readyz`, identity, signal, "ok", APISERVER_CHECK_TIMEOUT_MS)) return url;
  return undefined;
}

/**
 * The kubelet's key: made once, then read back at every start. Written
 * durably, as every file the node must find after a power cut: a key file
 * left empty would keep the kubelet from ever starting again.
 */
function kubeletKey(file: string) {
  if (existsSync(file)) return privateKeyFromRaw(new Uint8Array(readFileSync(file)));
  const key = generateKeyPair();
  writeFileDurably(file, rawPrivateKey(key.privateKey), { mode: 0o600 });
  return key.privateKey;
}

export function kubeletService(options: KubeletServiceOptions): Runnable {
  return async (ctx) => {
    options.report("kubelet", "waiting", "for containerd to answer");
    await options.containerdReady.waitFor((r) => r, { signal: ctx.signal });
    options.report("kubelet", "waiting", "for its certificates from the curator");
    const privateKey = kubeletKey(options.keyFile);
    const wait = options.apiserverWait ?? { intervalMs: APISERVER_WAIT_MS, listIntervalMs: APISERVER_LIST_WAIT_MS, boundMs: APISERVER_WAIT_BOUND_MS };
    const giveUpAt = performance.now() + wait.boundMs;
    const publicKey = rawPublicKey(createPublicKey(privateKey));
    let issued = await options.issue(publicKey, ctx.signal);
    let receivedAt = Date.now();
    while (issued.apiservers.length === 0) {
      // Only the curator knows when a controller comes: asked less often, since each answer is a new set of certificates.
      const message = "no apiserver: no UP node holds both the kubernetes-controller and the consensus role";
      options.report("kubelet", "waiting", message);
      if (performance.now() >= giveUpAt) throw new KubeletError(message);
      await sleep(wait.listIntervalMs, ctx.signal);
      issued = await options.issue(publicKey, ctx.signal);
      receivedAt = Date.now();
    }
    const identity = { ca: issued.ca, client: { certificate: issued.client, privateKey } };
    let apiserver = await chooseApiserver(issued.apiservers, identity, ctx.signal);
    while (!apiserver) {
      const message = `no apiserver answers /readyz (tried ${issued.apiservers.join(", ")})`;
      options.report("kubelet", "waiting", message);
      if (performance.now() >= giveUpAt) throw new KubeletError(message);
      await sleep(wait.intervalMs, ctx.signal);
      apiserver = await chooseApiserver(issued.apiservers, identity, ctx.signal);
    }
    ctx.logger.info("kubelet certificates issued", { apiserver, validUntil: issued.client.validTo });
    const node = {
      nodeId: options.nodeId,
      address: options.address,
      containerdSocket: options.containerdSocket,
      cgroupRoot: options.cgroupRoot,
      podLogsDir: join(options.rootDir, "..", "pod-logs"),
      apiserver,
      ca: issued.ca,
      server: issued.server,
      client: issued.client,
      key: privateKey,
    };
    writePrivateFiles(options.dir, KUBELET_FILES, kubeletFiles(options.dir, node));
    // Its registry logins come from the node's own binary (registries.ts),
    // asked about hosts on the ports the cluster's registries use now.
    const ports = providerPorts(options.registries?.peek() ?? []);
    writeCredentialProvider(options.dir, options.credentialProvider ?? process.execPath, ports);
    mkdirSync(options.rootDir, { recursive: true, mode: 0o700 });
    const healthz = `http://${options.address}:${KUBELET_HEALTHZ_PORT}/healthz`;
    ctx.run(
      "kubelet",
      component({ binDir: options.binDir, report: options.report }, "kubelet", kubeletArgs(options.dir, options.rootDir, node), {
        ...(options.onSpawn ? { onSpawn: options.onSpawn } : {}),
        ...(options.path ? { env: { PATH: options.path } } : {}),
        ready: async (signal) => {
          await untilOk(healthz, undefined, signal);
          ctx.logger.info("kubelet is ready", { url: healthz });
        },
      }),
    );
    // kube-proxy: Services on this node, against the same apiserver, renewed with the kubelet.
    const proxyNode = { nodeId: options.nodeId, address: options.address, apiserver, ca: issued.ca, certificate: issued.proxy, key: privateKey };
    writePrivateFiles(options.dir, PROXY_FILES, proxyFiles(options.dir, proxyNode));
    ctx.run(
      "kube-proxy",
      component({ binDir: options.binDir, report: options.report }, "kube-proxy", proxyArgs(options.dir), {
        ...(options.onSpawn ? { onSpawn: options.onSpawn } : {}),
        ...(options.path ? { env: { PATH: options.path } } : {}),
        ready: async (signal) => {
          const url = proxyHealthz(options.address);
          await untilOk(url, undefined, signal, "any-200");
          ctx.logger.info("kube-proxy has synced its rules", { url });
        },
      }),
    );
    if (options.dns) {
      const dnsNode = { address: options.address, apiserver, ca: issued.ca, certificate: issued.dns, key: privateKey, upstreams: options.dns.upstreams };
      writePrivateFiles(options.dir, DNS_FILES, dnsFiles(options.dir, dnsNode));
      ctx.run(
        "cluster-dns",
        component({ binDir: options.dns.binDir, report: (_name, state, message) => options.report("cluster-dns", state, message) }, "coredns", dnsArgs(options.dir), {
          ...(options.onSpawn ? { onSpawn: options.onSpawn } : {}),
          ready: async (signal) => {
            const url = dnsReady(options.address);
            await untilOk(url, undefined, signal, "any-200");
            ctx.logger.info("the cluster DNS server has synced", { url });
          },
        }),
      );
    }
    if (options.networkPolicy && !issued.networkPolicy) {
      // Only in a rolling update's middle: the kubelet and its pods matter more; the certificates' renewal asks again.
      options.report("network-policy", "waiting", "the curator that issued the kubelet's certificates gave none for the NetworkPolicy enforcer (an older version); asked again at their renewal");
      ctx.logger.warn("no certificate for the NetworkPolicy enforcer from the curator (an older version?): NetworkPolicy is not enforced on this node until the kubelet's certificates are renewed");
    }
    if (options.networkPolicy && issued.networkPolicy) {
      // NetworkPolicy: the enforcer judges new connections of this node's pods, against the same apiserver, renewed with the kubelet.
      const procSys = options.networkPolicy.procSys;
      const policyNode = { nodeId: options.nodeId, apiserver, ca: issued.ca, certificate: issued.networkPolicy, key: privateKey };
      writePrivateFiles(options.dir, NETWORK_POLICY_FILES, networkPolicyFiles(policyNode));
      ctx.run(
        "network-policy",
        component(
          { binDir: options.networkPolicy.binDir, report: (_name, state, message) => options.report("network-policy", state, message) },
          "kube-network-policies",
          networkPolicyArgs(options.dir, options.nodeId),
          {
            ...(options.onSpawn ? { onSpawn: options.onSpawn } : {}),
            // Before each start, in its own runnable: a node that cannot set them restarts only the enforcer, with the reason.
            after: async () => enableBridgeFilter(procSys),
            ready: async (signal) => {
              const url = networkPolicyReady();
              await untilOk(url, undefined, signal, "any-200");
              ctx.logger.info("the NetworkPolicy enforcer has listed pods, namespaces and policies", { url });
            },
          },
        ),
      );
    }
    if (options.volumes) {
      // The volume provisioner: this node's claims, as this node's volumes identity, renewed with the kubelet.
      ctx.run(
        "volume-provisioner",
        provisionerService({ nodeName: options.nodeId, store: options.volumes, apiserver, identity: { ca: issued.ca, certificate: issued.volumes, privateKey }, report: options.report }),
      );
    }
    ctx.signalHealthy();
    const check = options.apiserverCheck ?? { intervalMs: APISERVER_CHECK_MS, misses: APISERVER_MISSES };
    // Half of the life left when they arrived (their start is backdated for
    // clocks that differ a little).
    const renewAt = receivedAt + (Date.parse(issued.client.validTo) - receivedAt) * KUBELET_RENEW_FRACTION;
    // The kubelet, kube-proxy and the DNS server move to another apiserver
    // only when one answers: restarting them against the same one (the only
    // one, or the others silent too) would only take Services and DNS away
    // from this node's pods while they start again, and a busy apiserver
    // would get busier.
    const others = issued.apiservers.filter((url) => url !== apiserver);
    let silentSince: number | undefined;
    for (let misses = 0; ;) {
      await sleep(Math.max(0, Math.min(check.intervalMs, renewAt - Date.now())), ctx.signal);
      if (Date.now() >= renewAt) {
        throw new RestartRequest(`the kubelet's certificates are past half their life (valid until ${issued.client.validTo}); asking the curator for new ones`);
      }
      const uncovered = registryPorts(options.registries?.peek() ?? []).filter((port) => !ports.includes(port));
      if (uncovered.length) {
        throw new RestartRequest(`a registry host on port ${uncovered.join(", ")} was set; the kubelet reads which images ask its credential provider only when it starts (its pods keep running)`);
      }
      if (await answersOk(`${apiserver}/readyz`, identity, ctx.signal, "ok", APISERVER_CHECK_TIMEOUT_MS)) {
        if (silentSince !== undefined) ctx.logger.info("the apiserver answers /readyz again", { apiserver, silentForMs: Date.now() - silentSince });
        misses = 0;
        silentSince = undefined;
        continue;
      }
      silentSince ??= Date.now();
      if (++misses < check.misses) continue;
      const other = await chooseApiserver(others, identity, ctx.signal);
      if (other) throw new RestartRequest(`apiserver ${apiserver} stopped answering /readyz (${check.misses} checks in a row); ${other} answers: moving there`);
      if (misses === check.misses) {
        ctx.logger.warn("the apiserver does not answer /readyz, and no other does: staying with it", { apiserver, misses, others: others.join(" ") || "none" });
      }
    }
  };
}
