// The kubelet service's certificates: asked of the curator at start, and
// asked again at half their life, when the service starts over with the new
// ones. The kubelet binary here is a labelled stand-in (a shell script that
// sleeps): what is under test is the service around it, against a real TLS
// apiserver endpoint (/readyz, the Kubernetes CA, the kubelet's identity)
// and a /healthz endpoint on the kubelet's port.

import { afterAll, expect, test } from "bun:test";
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { create } from "@bufbuild/protobuf";
import { ContainerRegistrySchema, type ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import type { X509Certificate } from "node:crypto";
import { join } from "node:path";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { BACKDATE_MS, privateKeyPem, publicKeyFromRaw, toPem } from "../pki/mod.ts";
import { supervise, untilCancelled } from "../supervisor/mod.ts";
import { eventually, tempDir } from "../testing/mod.ts";
import { KUBELET_HEALTHZ_PORT } from "./kubelet.ts";
import { PROXY_HEALTHZ_PORT } from "./proxy.ts";
import { createKubernetesPKI, issueApiserverCertificate, issueKubeletCertificates } from "./pki.ts";
import { kubeletService, KUBELET_RENEW_FRACTION, type KubeletCertificates, type KubeletServiceOptions } from "./service_kubelet.ts";

const dir = tempDir("nodecore-kubelet-service-");
// An address of this test's own on loopback, for the kubelet's fixed healthz port.
const address = `127.${100 + (process.pid % 100)}.${Math.floor(process.pid / 100) % 250}.77`;
const pki = createKubernetesPKI();
const servers: { stop(force?: boolean): unknown }[] = [];
afterAll(() => {
  for (const server of servers) server.stop(true);
  dir[Symbol.dispose]();
});

/** A kubelet service under a supervisor with quick backoff, its files below `name` in this test's folder. */
function supervisedKubelet(name: string, binDir: string, issue: KubeletServiceOptions["issue"], report: KubeletServiceOptions["report"] = () => {}, extra: Partial<KubeletServiceOptions> = {}) {
  const ready = new Value<boolean>();
  ready.set(true);
  const { logger, entries } = captureLogger("root");
  const supervisor = supervise(
    async (ctx) => {
      ctx.run(
        "kubelet",
        kubeletService({
          nodeId: "node-00000000000000aa",
          address,
          binDir,
          dir: join(dir.path, name, "run"),
          rootDir: join(dir.path, name, "data", "kubelet"),
          keyFile: join(dir.path, name, "data", "kubelet.key"),
          containerdSocket: join(dir.path, "containerd.sock"),
          containerdReady: ready,
          cgroupRoot: "/test/pods",
          issue,
          report,
          ...extra,
        }),
      );
      await untilCancelled(ctx.signal);
    },
    { logger, backoff: { initialMs: 50, multiplier: 1.5, maxMs: 1000, jitter: 0 } },
  );
  return { supervisor, entries };
}

/** A TLS apiserver endpoint whose /readyz answers "ok" while `answers()` holds, 500 otherwise. */
function apiserverEndpoint(answers: () => boolean = () => true): string {
  const credential = issueApiserverCertificate(pki, [address]);
  const server = Bun.serve({
    hostname: address,
    port: 0,
    tls: { cert: toPem(credential.certificate), key: privateKeyPem(credential.privateKey) },
    fetch: (request) => (new URL(request.url).pathname === "/readyz" && answers() ? new Response("ok") : new Response("not ready", { status: 500 })),
  });
  servers.push(server);
  return `https://${address}:${server.port}`;
}

/** What the curator answers a kubelet key with: its certificates under the test PKI, and `apiservers`. */
function certificates(publicKey: Uint8Array, apiservers: string[], validForMs?: number): KubeletCertificates {
  const { server, client, proxy, dns, volumes, networkPolicy } = issueKubeletCertificates(pki, "node-00000000000000aa", publicKeyFromRaw(publicKey), [address], validForMs);
  return { ca: pki.ca.certificate, server, client, proxy, dns, volumes, networkPolicy, apiservers };
}

/** How often the service started the binary `name`, from its log. */
function starts(entries: readonly { message: string; fields: Record<string, unknown> }[], name: string): number {
  return entries.filter((e) => e.message === "process started" && String(e.fields.command).endsWith(`/${name}`)).length;
}

let standIns: string | undefined;
/** The kubelet's and kube-proxy's health endpoints, and stand-in binaries that only stay up: made once. */
function standInKubelet(): string {
  if (standIns) return standIns;
  servers.push(Bun.serve({ hostname: address, port: KUBELET_HEALTHZ_PORT, fetch: () => new Response("ok") }));
  servers.push(Bun.serve({ hostname: address, port: PROXY_HEALTHZ_PORT, fetch: () => Response.json({ lastUpdated: new Date().toISOString() }) }));
  const binDir = join(dir.path, "bin");
  Bun.spawnSync(["mkdir", "-p", binDir]);
  for (const name of ["kubelet", "kube-proxy"]) {
    writeFileSync(join(binDir, name), `#!/bin/sh\n# a test stand-in for ${name}: it only stays up\nexec sleep 600\n`);
    chmodSync(join(binDir, name), 0o755);
  }
  standIns = binDir;
  return binDir;
}

test("the kubelet's certificates are asked again at half their life, and the kubelet starts over with them", async () => {
  const apiserverUrl = apiserverEndpoint();
  const binDir = standInKubelet();

  // Certificates start BACKDATE_MS in the past: these have 4 s left when issued.
  const validForMs = BACKDATE_MS + 4_000;
  const issued: X509Certificate[] = [];
  const issuedAt: number[] = [];
  const issue = async (publicKey: Uint8Array): Promise<KubeletCertificates> => {
    const answer = certificates(publicKey, [apiserverUrl], validForMs);
    issued.push(answer.client);
    issuedAt.push(Date.now());
    return answer;
  };
  const { supervisor, entries } = supervisedKubelet("renewal", binDir, issue);
  try {
    await eventually(() => expect(issued.length).toBeGreaterThanOrEqual(2), { timeoutMs: 20_000, what: "a second issue" });
    // The first set was given up at half its remaining life (2 s of 4): not
    // at once, and before it expired.
    const renewal = entries.find((e) => e.message === "restart requested" && /^the kubelet's certificates are past half their life/.test(String(e.fields.reason)));
    expect(renewal).toBeDefined();
    const first = issued[0]!;
    // (validTo has whole seconds: the life left is what it says, from the issue.)
    const halfLeft = (Date.parse(first.validTo) - issuedAt[0]!) * KUBELET_RENEW_FRACTION;
    expect(issuedAt[1]! - issuedAt[0]!).toBeGreaterThanOrEqual(halfLeft - 50);
    expect(issuedAt[1]!).toBeLessThan(Date.parse(first.validTo) + 1000);
    // The same kubelet key, so the same identity across renewals.
    expect(issued[1]!.publicKey.export({ type: "spki", format: "der" })).toEqual(first.publicKey.export({ type: "spki", format: "der" }));
    // The kubelet and kube-proxy were started again with the new files.
    await eventually(() => expect([starts(entries, "kubelet"), starts(entries, "kube-proxy")]).toEqual([2, 2]), { what: "the kubelet and kube-proxy started again" });
  } finally {
    await supervisor.stop();
  }
}, 60_000);

test("an apiserver that starts answering while the service waits for one is taken at once, without the service starting over", async () => {
  let answers = false;
  const apiserver = apiserverEndpoint(() => answers);
  const binDir = standInKubelet();
  const lines: { state: string; message: string }[] = [];
  let asked = 0;
  const { supervisor, entries } = supervisedKubelet(
    "late",
    binDir,
    async (publicKey) => {
      asked++;
      return certificates(publicKey, [apiserver]);
    },
    (_component, state, message) => lines.push({ state, message }),
    { apiserverWait: { intervalMs: 50, listIntervalMs: 50, boundMs: 60_000 } },
  );
  try {
    await eventually(() => expect(lines).toContainEqual({ state: "waiting", message: `no apiserver answers /readyz (tried ${apiserver})` }), { timeoutMs: 20_000, what: "the service waiting" });
    await Bun.sleep(300);
    answers = true;
    await eventually(() => expect(starts(entries, "kubelet")).toBeGreaterThan(0), { timeoutMs: 10_000, what: "the kubelet started" });
    // One issue, no runnable died: the wait was the service's own.
    expect(asked).toBe(1);
    expect(entries.some((e) => e.message === "runnable died")).toBe(false);
  } finally {
    await supervisor.stop();
  }
}, 60_000);

test("while the curator names no apiserver the service asks it again, and starts the kubelet once it names one, without starting over", async () => {
  const apiserver = apiserverEndpoint();
  const binDir = standInKubelet();
  const lines: { state: string; message: string }[] = [];
  let asked = 0;
  const { supervisor, entries } = supervisedKubelet(
    "nocontroller",
    binDir,
    async (publicKey) => {
      asked++;
      return certificates(publicKey, asked < 3 ? [] : [apiserver]);
    },
    (_component, state, message) => lines.push({ state, message }),
    { apiserverWait: { intervalMs: 50, listIntervalMs: 50, boundMs: 60_000 } },
  );
  try {
    await eventually(() => expect(starts(entries, "kubelet")).toBeGreaterThan(0), { timeoutMs: 10_000, what: "the kubelet started" });
    expect(lines).toContainEqual({ state: "waiting", message: "no apiserver: no UP node holds both the kubernetes-controller and the consensus role" });
    expect(asked).toBe(3);
    expect(entries.some((e) => e.message === "runnable died")).toBe(false);
  } finally {
    await supervisor.stop();
  }
}, 60_000);

test("with no apiserver answering, the kubelet line says so, naming what was tried, and past its wait the service asks the curator again, with backoff", async () => {
  // A port nothing listens on, on this test's address.
  const unreachable = `https://${address}:1`;
  const binDir = join(dir.path, "bin-none");
  const lines: { state: string; message: string }[] = [];
  let asked = 0;
  const { supervisor } = supervisedKubelet(
    "none",
    binDir,
    async (publicKey) => {
      asked++;
      return certificates(publicKey, [unreachable]);
    },
    (_component, state, message) => lines.push({ state, message }),
    { apiserverWait: { intervalMs: 50, listIntervalMs: 50, boundMs: 200 } },
  );
  try {
    await eventually(() => expect(asked).toBeGreaterThanOrEqual(3), { timeoutMs: 20_000, what: "the service trying again" });
    expect(lines).toContainEqual({ state: "waiting", message: `no apiserver answers /readyz (tried ${unreachable})` });
    // The kubelet itself was never started without an apiserver.
    expect(lines.some((l) => l.state === "starting")).toBe(false);
  } finally {
    await supervisor.stop();
  }
}, 60_000);

test("an apiserver that stops answering is kept while no other answers (nothing restarts), and left for one that does", async () => {
  let firstAnswers = true;
  let secondAnswers = false;
  const first = apiserverEndpoint(() => firstAnswers);
  const second = apiserverEndpoint(() => secondAnswers);
  const binDir = standInKubelet();
  const { supervisor, entries } = supervisedKubelet(
    "follow",
    binDir,
    async (publicKey) => {
      return certificates(publicKey, [first, second]);
    },
    () => {},
    { apiserverCheck: { intervalMs: 100, misses: 2 } },
  );
  try {
    await eventually(() => expect(starts(entries, "kubelet")).toBe(1), { timeoutMs: 20_000, what: "the kubelet started against the first apiserver" });
    firstAnswers = false;
    await eventually(() => expect(entries.some((e) => e.message === "the apiserver does not answer /readyz, and no other does: staying with it")).toBe(true), { timeoutMs: 10_000 });
    await Bun.sleep(500);
    expect(starts(entries, "kubelet")).toBe(1);
    expect(entries.some((e) => e.message === "restart requested")).toBe(false);
    // It answers again: nothing changes, and the log says it.
    firstAnswers = true;
    await eventually(() => expect(entries.some((e) => e.message === "the apiserver answers /readyz again")).toBe(true), { timeoutMs: 10_000 });
    // Silent again, and now the second answers: the service moves there.
    firstAnswers = false;
    secondAnswers = true;
    await eventually(
      () => expect(entries.find((e) => e.message === "restart requested")?.fields.reason).toBe(`apiserver ${first} stopped answering /readyz (2 checks in a row); ${second} answers: moving there`),
      { timeoutMs: 10_000 },
    );
    await eventually(() => expect(starts(entries, "kubelet")).toBe(2), { timeoutMs: 20_000, what: "the kubelet started again against the second" });
  } finally {
    await supervisor.stop();
  }
}, 60_000);

test("a registry host on a port the credential provider's patterns do not cover restarts the kubelet once, with the port covered; a login or a covered port restarts nothing", async () => {
  const apiserverUrl = apiserverEndpoint();
  const binDir = standInKubelet();
  const registries = new Value<readonly ContainerRegistry[]>();
  registries.set([create(ContainerRegistrySchema, { host: "registry.example.com:5000" })]);
  const { supervisor, entries } = supervisedKubelet(
    "ports",
    binDir,
    async (publicKey) => certificates(publicKey, [apiserverUrl]),
    () => {},
    { registries, apiserverCheck: { intervalMs: 100, misses: 3 } },
  );
  const patterns = () => (JSON.parse(readFileSync(join(dir.path, "ports", "run", "credential-providers.json"), "utf8")) as { providers: { matchImages: string[] }[] }).providers[0]!.matchImages;
  try {
    await eventually(() => expect(starts(entries, "kubelet")).toBe(1), { timeoutMs: 20_000, what: "the kubelet started" });
    expect(patterns()).toContain("*.*.*:5000");
    expect(patterns()).not.toContain("*.*.*:6000");
    registries.set([create(ContainerRegistrySchema, { host: "registry.example.com:5000", credentials: { username: "u", password: "p" } }), create(ContainerRegistrySchema, { host: "docker.io" })]);
    await Bun.sleep(500);
    expect(entries.some((e) => e.message === "restart requested")).toBe(false);
    registries.set([create(ContainerRegistrySchema, { host: "images.example.com:6000" })]);
    await eventually(() => expect(entries.find((e) => e.message === "restart requested")?.fields.reason).toMatch(/^a registry host on port 6000 was set/), { timeoutMs: 10_000 });
    await eventually(() => expect(starts(entries, "kubelet")).toBe(2), { timeoutMs: 20_000, what: "the kubelet started again" });
    expect(patterns()).toContain("*.*.*:6000");
    await Bun.sleep(500);
    expect(starts(entries, "kubelet")).toBe(2);
  } finally {
    await supervisor.stop();
  }
}, 60_000);

test("the NetworkPolicy enforcer runs beside the kubelet, with the bridge's sysctls set first; a curator of an older version that gives no enforcer's certificate leaves the kubelet running and the enforcer's line saying why", async () => {
  const apiserverUrl = apiserverEndpoint();
  const binDir = standInKubelet();
  writeFileSync(join(binDir, "kube-network-policies"), "#!/bin/sh\n# a test stand-in for the enforcer: it only stays up\nexec sleep 600\n");
  chmodSync(join(binDir, "kube-network-policies"), 0o755);
  const procSys = join(dir.path, "enforcer-sys");
  mkdirSync(join(procSys, "net", "bridge"), { recursive: true });
  for (const older of [false, true]) {
    const lines: [string, string, string][] = [];
    const issue = async (publicKey: Uint8Array): Promise<KubeletCertificates> => {
      const { networkPolicy, ...rest } = certificates(publicKey, [apiserverUrl]);
      return older ? rest : { ...rest, networkPolicy: networkPolicy! };
    };
    const name = older ? "enforcer-older" : "enforcer";
    const { supervisor, entries } = supervisedKubelet(name, binDir, issue, (component, state, message) => lines.push([component, state, message]), { networkPolicy: { binDir, procSys } });
    try {
      await eventually(() => expect(starts(entries, "kubelet")).toBe(1), { timeoutMs: 20_000, what: "the kubelet started" });
      if (older) {
        await eventually(() => expect(lines).toContainEqual(["network-policy", "waiting", expect.stringContaining("gave none for the NetworkPolicy enforcer (an older version)")]), {
          what: "the enforcer's line",
        });
        expect(starts(entries, "kube-network-policies")).toBe(0);
      } else {
        await eventually(() => expect(starts(entries, "kube-network-policies")).toBe(1), { timeoutMs: 20_000, what: "the enforcer started" });
        expect(readFileSync(join(procSys, "net", "bridge", "bridge-nf-call-iptables"), "utf8")).toBe("1\n");
        const kubeconfig = readFileSync(join(dir.path, name, "run", "network-policy.kubeconfig"), "utf8");
        expect(kubeconfig).toContain(apiserverUrl);
      }
    } finally {
      await supervisor.stop();
    }
  }
}, 60_000);
