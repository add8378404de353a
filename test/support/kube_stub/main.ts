// kube-stub: a STAND-IN for the Kubernetes control-plane binaries, for
// tests only. It is not Kubernetes, never goes into an image, and never
// calls itself Kubernetes in its output.
//
//   bun test/support/kube_stub/main.ts <kube-apiserver|kube-controller-manager|kube-scheduler> --flag=value...
//
// What it does, per component:
//  - checks the command line against the flags a secure setup needs
//    (flags.ts) and refuses unknown flags, as the real binaries do;
//  - checks every certificate and key it is given: chain, use, names, and
//    that each key belongs to its certificate (checks.ts);
//  - kube-apiserver: proves its etcd client certificate against the real
//    etcd (GET /health over mutual TLS), then serves /readyz, /livez and
//    /healthz over TLS with its serving certificate, accepting only client
//    certificates of --client-ca-file, and keeps the objects it is sent
//    (GET/POST/PUT/DELETE by path) in memory, recording each request;
//  - kube-controller-manager and kube-scheduler: check their kubeconfig's
//    identity, wait for the apiserver's /readyz with it, then serve
//    /healthz on their secure port.
// Each step is written to KUBE_STUB_RECORD (JSON lines), when set.
//
// What it does NOT prove: anything about Kubernetes's own behaviour (API
// semantics, RBAC evaluation, scheduling, controllers, kubelets).

import { X509Certificate, createPublicKey, type KeyObject } from "node:crypto";
import { appendFileSync } from "node:fs";
import type { IncomingMessage, ServerResponse } from "node:http";
import { createSecureServer, type Http2ServerRequest, type Http2ServerResponse } from "node:http2";
import type { TLSSocket } from "node:tls";
import { parseKubeconfig } from "../../../internal/kubernetes/kubeconfig.ts";
import {
  StubError,
  certificatesOf,
  checkChain,
  checkKeyMatches,
  checkNames,
  checkPair,
  checkUsage,
  firstHost,
  privateKeyOf,
  readFlagFile,
  subjectField,
} from "./checks.ts";
import { COMPONENTS, parseFlags, type Component } from "./flags.ts";

const RETRY_MS = 200;

function record(component: Component, entry: Record<string, unknown>): void {
  const path = process.env.KUBE_STUB_RECORD;
  if (path) appendFileSync(path, JSON.stringify({ component, at: Date.now(), ...entry }) + "\n");
}

function say(component: Component, message: string): void {
  process.stderr.write(`kube-stub ${component} (stand-in): ${message}\n`);
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** The apiserver's checks; returns what it serves with. */
function checkApiserver(flags: Record<string, string>) {
  const clientCAs = certificatesOf("client-ca-file", flags["client-ca-file"]!);
  const serving = checkPair(flags, "tls-cert-file", "tls-private-key-file", clientCAs, "serverAuth");
  const serviceIp = firstHost("service-cluster-ip-range", flags["service-cluster-ip-range"]!);
  checkNames("--tls-cert-file", serving.certificate, {
    dns: ["kubernetes", "kubernetes.default", "kubernetes.default.svc", "localhost"],
    ips: [serviceIp, flags["advertise-address"]!],
  });
  const kubeletCAs = certificatesOf("kubelet-certificate-authority", flags["kubelet-certificate-authority"]!);
  checkPair(flags, "kubelet-client-certificate", "kubelet-client-key", kubeletCAs, "clientAuth");
  const etcdCAs = certificatesOf("etcd-cafile", flags["etcd-cafile"]!);
  const etcdClient = checkPair(flags, "etcd-certfile", "etcd-keyfile", etcdCAs, "clientAuth");
  // Service-account keys: the public key verifies what the private key signs.
  const signing = privateKeyOf("service-account-signing-key-file", flags["service-account-signing-key-file"]!);
  if (signing.asymmetricKeyType !== "ec" && signing.asymmetricKeyType !== "rsa") {
    throw new StubError(`--service-account-signing-key-file: a ${signing.asymmetricKeyType} key; service-account tokens need RSA or ECDSA`);
  }
  const publicText = readFlagFile("service-account-key-file", flags["service-account-key-file"]!);
  let verifying: KeyObject;
  try {
    verifying = createPublicKey(publicText);
  } catch (error) {
    throw new StubError(`--service-account-key-file: not a public key (${(error as Error).message})`);
  }
  const spki = (k: KeyObject) => k.export({ format: "der", type: "spki" }).toString("base64");
  if (spki(verifying) !== spki(createPublicKey(signing))) throw new StubError("--service-account-key-file does not hold the public half of --service-account-signing-key-file");
  // The front proxy: its own CA, and a client name it allows.
  const requestheaderCAs = certificatesOf("requestheader-client-ca-file", flags["requestheader-client-ca-file"]!);
  const proxy = checkPair(flags, "proxy-client-cert-file", "proxy-client-key-file", requestheaderCAs, "clientAuth");
  const allowed = flags["requestheader-allowed-names"]!.split(",");
  const proxyName = subjectField(proxy.certificate, "CN")[0] ?? "";
  if (!allowed.includes(proxyName)) throw new StubError(`--proxy-client-cert-file: its name ${proxyName} is not in --requestheader-allowed-names=${allowed.join(",")}`);
  for (const ca of requestheaderCAs) {
    if (clientCAs.some((c) => c.fingerprint256 === ca.fingerprint256)) {
      throw new StubError("--requestheader-client-ca-file is the same CA as --client-ca-file: any client certificate could then pass as the front proxy");
    }
  }
  return { serving, clientCAs, etcdCAs, etcdClient };
}

async function waitForEtcd(component: Component, flags: Record<string, string>, etcd: { ca: X509Certificate[]; cert: string; key: string }): Promise<void> {
  const url = `${flags["etcd-servers"]!.split(",")[0]}/health`;
  for (let attempt = 1; ; attempt++) {
    try {
      const response = await fetch(url, { tls: { ca: etcd.ca.map((c) => c.toString()), cert: etcd.cert, key: etcd.key } } as RequestInit);
      const body = await response.text();
      if (response.ok && body.includes('"health":"true"')) {
        say(component, `etcd at ${url} answers with this client certificate`);
        record(component, { event: "etcd-healthy", url });
        return;
      }
      if (attempt === 1) say(component, `etcd at ${url} answered ${response.status}: ${body.trim()}; retrying`);
    } catch (error) {
      if (attempt === 1 || attempt % 25 === 0) say(component, `etcd at ${url} not reachable yet (${(error as Error).message}); retrying`);
    }
    await sleep(RETRY_MS);
  }
}

type Request_ = Http2ServerRequest | IncomingMessage;
type Response_ = Http2ServerResponse | ServerResponse;

/** The client's user and groups, from its verified certificate. */
function userOf(request: Request_): { user: string; groups: string[] } {
  const peer = (request.socket as TLSSocket).getPeerCertificate?.();
  const subject = peer?.subject as Record<string, string | string[]> | undefined;
  const list = (v: string | string[] | undefined) => (v === undefined ? [] : Array.isArray(v) ? v : [v]);
  return { user: list(subject?.CN)[0] ?? "", groups: list(subject?.O) };
}

async function readBody(request: Request_): Promise<string> {
  const chunks: Buffer[] = [];
  for await (const chunk of request) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks).toString();
}

function send(response: Response_, code: number, contentType: string, body: string): void {
  // Both kinds of response (HTTP/1.1 and HTTP/2 compatibility) have these two.
  (response as ServerResponse).writeHead(code, { "content-type": contentType });
  (response as ServerResponse).end(body);
}

function status(response: Response_, code: number, reason: string, message: string): void {
  send(response, code, "application/json", JSON.stringify({ kind: "Status", apiVersion: "v1", status: "Failure", reason, message, code }));
}

/** Serves the health endpoints, and for the apiserver a map of objects by path. */
function serve(
  component: Component,
  flags: Record<string, string>,
  tls: { cert: string; key: string; ca: X509Certificate[] },
  objects: Map<string, string> | undefined,
): Promise<void> {
  // node:http2's server (speaking HTTP/1.1 too): bun's node:https does not
  // show a request's client certificate, its TLS sockets here do.
  const options = { allowHTTP1: true, cert: tls.cert, key: tls.key, ca: tls.ca.map((c) => c.toString()), requestCert: true, rejectUnauthorized: true };
  const server = createSecureServer(options, (request: Request_, response: Response_) => {
    const { user, groups } = userOf(request);
    const url = new URL(request.url ?? "/", "https://stub");
    void (async () => {
      const body = request.method === "POST" || request.method === "PUT" ? await readBody(request) : "";
      const health = ["/readyz", "/livez", "/healthz"].includes(url.pathname);
      record(component, { event: "request", method: request.method, path: url.pathname, user, groups, ...(body ? { body: JSON.parse(body) } : {}) });
      if (health) {
        return send(response, 200, "text/plain", "ok");
      }
      if (!objects) return status(response, 404, "NotFound", `${component} stand-in serves only health endpoints`);
      // Names may arrive percent-encoded ("a%3Ab" for "a:b"), as real clients send them.
      const path = decodeURIComponent(url.pathname);
      switch (request.method) {
        case "GET": {
          const stored = objects.get(path);
          if (stored === undefined) return status(response, 404, "NotFound", `${path} not found`);
          return send(response, 200, "application/json", stored);
        }
        case "POST": {
          const object = JSON.parse(body) as { metadata?: { name?: string } };
          const name = object.metadata?.name;
          if (!name) return status(response, 422, "Invalid", "metadata.name is required");
          const at = `${path}/${name}`;
          if (objects.has(at)) return status(response, 409, "AlreadyExists", `${at} already exists`);
          objects.set(at, body);
          return send(response, 201, "application/json", body);
        }
        case "PUT":
          if (!objects.has(path)) return status(response, 404, "NotFound", `${path} not found`);
          objects.set(path, body);
          return send(response, 200, "application/json", body);
        case "DELETE":
          if (!objects.delete(path)) return status(response, 404, "NotFound", `${path} not found`);
          return status(response, 200, "", "deleted");
        default:
          return status(response, 405, "MethodNotAllowed", `${request.method} not supported`);
      }
    })().catch((error: Error) => status(response, 500, "InternalError", error.message));
  });
  return new Promise((resolve, reject) => {
    server.once("error", (error) => reject(new StubError(`cannot listen on ${flags["bind-address"]}:${flags["secure-port"]}: ${error.message}`)));
    server.listen(Number(flags["secure-port"]), flags["bind-address"], () => {
      say(component, `serving on https://${flags["bind-address"]}:${flags["secure-port"]}`);
      record(component, { event: "serving", address: flags["bind-address"], port: Number(flags["secure-port"]) });
      resolve();
    });
  });
}

/** A kubeconfig's identity, checked: chains to its CA, a client certificate, the key its own. */
function kubeconfigIdentity(path: string) {
  const kubeconfig = parseKubeconfig(readFlagFile("kubeconfig", path));
  const ca = certificatesOf("kubeconfig (certificate-authority-data)", path, kubeconfig.ca);
  const [certificate] = certificatesOf("kubeconfig (client-certificate-data)", path, kubeconfig.certificate);
  checkKeyMatches("kubeconfig (client-key-data)", certificate!, privateKeyOf("kubeconfig (client-key-data)", path, kubeconfig.privateKey));
  checkChain("--kubeconfig's client certificate", certificate!, ca);
  checkUsage("--kubeconfig's client certificate", certificate!, "clientAuth");
  return { kubeconfig, certificate: certificate!, user: subjectField(certificate!, "CN")[0] ?? "", groups: subjectField(certificate!, "O") };
}

/** Waits, like the real components, until the apiserver answers /readyz to this identity. */
async function waitForApiserver(component: Component, kubeconfig: ReturnType<typeof parseKubeconfig>): Promise<void> {
  for (let attempt = 1; ; attempt++) {
    try {
      const response = await fetch(`${kubeconfig.server}/readyz`, { tls: { ca: kubeconfig.ca, cert: kubeconfig.certificate, key: kubeconfig.privateKey } } as RequestInit);
      if (response.ok) break;
    } catch (error) {
      if (attempt === 1 || attempt % 25 === 0) say(component, `apiserver at ${kubeconfig.server} not ready yet (${(error as Error).message})`);
    }
    await sleep(RETRY_MS);
  }
  say(component, `apiserver at ${kubeconfig.server} is ready`);
  record(component, { event: "apiserver-ready", server: kubeconfig.server });
}

/**
 * The kubelet's checks: its configuration (authentication, authorization,
 * ports, CRI endpoint), its serving and client certificates (the node's
 * name in system:nodes), and containerd serving CRI on that socket; then it
 * registers its Node and serves /healthz.
 */
async function runKubelet(flags: Record<string, string>): Promise<void> {
  const component: Component = "kubelet";
  const name = flags["hostname-override"]!;
  const nodeIp = flags["node-ip"]!;
  let config: Record<string, any>;
  try {
    config = JSON.parse(readFlagFile("config", flags.config!)) as Record<string, any>;
  } catch (error) {
    if (error instanceof StubError) throw error;
    throw new StubError(`--config=${flags.config}: not JSON (${(error as Error).message})`);
  }
  const expect = (ok: boolean, what: string) => {
    if (!ok) throw new StubError(`--config: ${what}`);
  };
  expect(config.kind === "KubeletConfiguration", "kind must be KubeletConfiguration");
  expect(config.authentication?.anonymous?.enabled === false, "authentication.anonymous.enabled must be false");
  expect(config.authentication?.webhook?.enabled === true, "authentication.webhook.enabled must be true");
  expect(config.authorization?.mode === "Webhook", "authorization.mode must be Webhook");
  expect(config.readOnlyPort === 0, "readOnlyPort must be 0 (no unauthenticated port)");
  expect(config.address === nodeIp, `address must be the node IP ${nodeIp}`);
  expect(config.cgroupDriver === "cgroupfs", "cgroupDriver must be cgroupfs (no systemd on a node)");
  const clientCAs = certificatesOf("config authentication.x509.clientCAFile", config.authentication?.x509?.clientCAFile ?? "");
  const serving = checkPair({ cert: config.tlsCertFile, key: config.tlsPrivateKeyFile }, "cert", "key", clientCAs, "serverAuth");
  checkNames("config tlsCertFile", serving.certificate, { ips: [nodeIp] });
  const servingName = subjectField(serving.certificate, "CN")[0];
  if (servingName !== `system:node:${name}`) throw new StubError(`config tlsCertFile: is ${servingName}, must be system:node:${name}`);
  const identity = kubeconfigIdentity(flags.kubeconfig!);
  if (identity.user !== `system:node:${name}` || !identity.groups.includes("system:nodes")) {
    throw new StubError(`--kubeconfig's client certificate is ${identity.user} in ${identity.groups.join(",") || "no group"}; the Node authorizer needs system:node:${name} in system:nodes`);
  }
  const endpoint = String(config.containerRuntimeEndpoint ?? "");
  if (!endpoint.startsWith("unix://")) throw new StubError(`--config: containerRuntimeEndpoint must be a unix:// socket, got ${endpoint}`);
  const socket = endpoint.slice("unix://".length);
  // containerd answers on that socket with its CRI plugin loaded (ctr: the host's, as this stand-in runs on hosts only).
  const plugins = Bun.spawnSync(["ctr", "--address", socket, "plugins", "ls"]);
  const criLoaded = plugins.stdout.toString().split("\n").some((line) => /io\.containerd\.grpc\.v1\s+cri\s+.*\bok\b/.test(line));
  if (!criLoaded) throw new StubError(`containerRuntimeEndpoint ${socket}: containerd does not serve CRI there (${plugins.stderr.toString().trim() || "plugin not ok"})`);
  say(component, `flags, configuration and certificates check out; identity system:node:${name}; containerd serves CRI on ${socket}`);
  record(component, { event: "checked", user: identity.user, socket });
  await waitForApiserver(component, identity.kubeconfig);
  // Registration, as the kubelet does it: a Node named for itself.
  const node = { apiVersion: "v1", kind: "Node", metadata: { name }, status: { addresses: [{ type: "InternalIP", address: nodeIp }] } };
  const tls = { ca: identity.kubeconfig.ca, cert: identity.kubeconfig.certificate, key: identity.kubeconfig.privateKey };
  const registered = await fetch(`${identity.kubeconfig.server}/api/v1/nodes`, { method: "POST", body: JSON.stringify(node), tls } as RequestInit);
  if (registered.status !== 201 && registered.status !== 409) throw new StubError(`registering Node ${name} failed: ${registered.status} ${await registered.text()}`);
  record(component, { event: "registered", name });
  // /healthz on the healthz address, plain HTTP as the real kubelet's.
  Bun.serve({ hostname: config.healthzBindAddress, port: config.healthzPort, fetch: () => new Response("ok") });
  await serve(component, { "bind-address": config.address, "secure-port": String(config.port) }, { cert: serving.cert, key: serving.keyText, ca: clientCAs }, undefined);
}

/** The controller-manager's or scheduler's checks, then waiting for the apiserver with its identity. */
async function runClient(component: Component, flags: Record<string, string>): Promise<void> {
  const expectedUser = component === "kube-controller-manager" ? "system:kube-controller-manager" : "system:kube-scheduler";
  for (const flag of ["authentication-kubeconfig", "authorization-kubeconfig"]) {
    if (flags[flag] !== flags.kubeconfig) throw new StubError(`--${flag} differs from --kubeconfig; this setup uses one identity per component`);
  }
  const { kubeconfig, user } = kubeconfigIdentity(flags.kubeconfig!);
  if (user !== expectedUser) throw new StubError(`--kubeconfig's client certificate is ${user}; ${component} must be ${expectedUser} to get its default RBAC permissions`);
  const clientCAs = certificatesOf("client-ca-file", flags["client-ca-file"]!);
  const serving = checkPair(flags, "tls-cert-file", "tls-private-key-file", clientCAs, "serverAuth");
  checkNames("--tls-cert-file", serving.certificate, { ips: [flags["bind-address"]!] });
  if (component === "kube-controller-manager") {
    certificatesOf("root-ca-file", flags["root-ca-file"]!);
    const key = privateKeyOf("service-account-private-key-file", flags["service-account-private-key-file"]!);
    if (key.asymmetricKeyType !== "ec" && key.asymmetricKeyType !== "rsa") throw new StubError(`--service-account-private-key-file: a ${key.asymmetricKeyType} key; tokens need RSA or ECDSA`);
    firstHost("cluster-cidr", flags["cluster-cidr"]!);
    firstHost("service-cluster-ip-range", flags["service-cluster-ip-range"]!);
  }
  say(component, `flags and certificates check out; identity ${user}`);
  record(component, { event: "checked", user });
  await waitForApiserver(component, kubeconfig);
  await serve(component, flags, { cert: serving.cert, key: serving.keyText, ca: clientCAs }, undefined);
}

async function main(): Promise<void> {
  const [component, ...args] = process.argv.slice(2);
  if (!COMPONENTS.includes(component as Component)) {
    process.stderr.write(`kube-stub (stand-in): the first argument must be one of ${COMPONENTS.join(", ")}\n`);
    process.exit(2);
  }
  const c = component as Component;
  try {
    const flags = parseFlags(c, args);
    record(c, { event: "started", pid: process.pid, args });
    if (c === "kube-apiserver") {
      const checked = checkApiserver(flags);
      say(c, "flags and certificates check out");
      record(c, { event: "checked" });
      await waitForEtcd(c, flags, { ca: checked.etcdCAs, cert: checked.etcdClient.cert, key: checked.etcdClient.keyText });
      await serve(c, flags, { cert: checked.serving.cert, key: checked.serving.keyText, ca: checked.clientCAs }, new Map());
    } else if (c === "kubelet") {
      await runKubelet(flags);
    } else {
      await runClient(c, flags);
    }
    const stop = (signal: string) => {
      say(c, `${signal}: exiting`);
      record(c, { event: "stopped", signal });
      process.exit(0);
    };
    process.on("SIGTERM", () => stop("SIGTERM"));
    process.on("SIGINT", () => stop("SIGINT"));
  } catch (error) {
    const message = error instanceof StubError ? error.message : `unexpected: ${(error as Error).message}`;
    say(c, `refused to start: ${message}`);
    record(c, { event: "refused", message });
    process.exit(1);
  }
}

await main();
