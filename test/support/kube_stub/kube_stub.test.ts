// The stand-in itself, against the node core's real PKI, files and flag
// builders and a real etcd: what it accepts, and that it refuses what a
// real component would refuse (or what a secure setup must not do).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { Value } from "../../../internal/event/mod.ts";
import { captureLogger } from "../../../internal/log/mod.ts";
import { supervise, untilCancelled, type Supervisor } from "../../../internal/supervisor/mod.ts";
import { join } from "node:path";
import { issueEtcdClientCertificate } from "../../../internal/consensus/mod.ts";
import { startTestCluster, type TestCluster } from "../../../internal/curator/test_cluster.ts";
import {
  BASE_BINDINGS,
  chooseApiserver,
  issueKubeletCertificates,
  kubeletService,
  parseKubeconfig,
  CONTROLLER_FILES,
  answersOk,
  bindingObject,
  reconcile,
  apiserverArgs,
  controllerFiles,
  controllerManagerArgs,
  createKubernetesPKI,
  schedulerArgs,
  writeControllerFiles,
  type KubernetesPKI,
} from "../../../internal/kubernetes/mod.ts";
import { generateKeyPair, privateKeyPem, publicKeyFromRaw, toPem } from "../../../internal/pki/mod.ts";
import { eventually, tempDir } from "../../../internal/testing/mod.ts";
import { installKubeStub, readStubRecord } from "./install.ts";

/** A loopback address of its own, so the components' fixed ports clash with nothing else on the host. */
const ADDRESS = "127.0.42.1";

let cluster: TestCluster;
let pki: KubernetesPKI;
const dir = tempDir("kube-stub-");
const files = join(dir.path, "files");
const bin = join(dir.path, "bin");
const recordPath = join(dir.path, "record.jsonl");
const running: Bun.Subprocess[] = [];

beforeAll(async () => {
  cluster = await startTestCluster();
  pki = createKubernetesPKI();
  const etcdKey = generateKeyPair();
  writeControllerFiles(
    files,
    controllerFiles(pki, {
      address: ADDRESS,
      apiserverUrl: `https://${ADDRESS}:6443`,
      etcd: { ca: cluster.etcdCA.certificate, client: { certificate: issueEtcdClientCertificate(cluster.etcdCA, etcdKey.publicKey, "kube-apiserver"), privateKey: etcdKey.privateKey } },
    }),
  );
  installKubeStub(bin, { record: recordPath });
});

afterAll(async () => {
  for (const p of running) p.kill("SIGKILL");
  await cluster?.close();
  dir[Symbol.dispose]();
});

const flagOptions = () => ({ dir: files, address: ADDRESS, etcdUrl: cluster.etcdUrl });

function start(component: string, args: string[]): Bun.Subprocess<"ignore", "ignore", "pipe"> {
  const child = Bun.spawn([join(bin, component), ...args], { stdin: "ignore", stdout: "ignore", stderr: process.env.KUBE_STUB_DEBUG ? "inherit" : "pipe" });
  running.push(child);
  return child;
}

/** Runs a component that must refuse to start; returns what it said. */
async function refusal(component: string, args: string[]): Promise<string> {
  const child = start(component, args);
  const [code, stderr] = await Promise.all([child.exited, new Response(child.stderr).text()]);
  expect(code).toBe(1);
  return stderr;
}

describe("kube-stub, the stand-in for the Kubernetes control plane", () => {
  test("accepts the node core's apiserver, controller-manager and scheduler, checks etcd, and gates on /readyz", async () => {
    const apiserver = start("kube-apiserver", apiserverArgs(flagOptions()));
    const controllerManager = start("kube-controller-manager", controllerManagerArgs(flagOptions()));
    const scheduler = start("kube-scheduler", schedulerArgs(flagOptions()));
    await eventually(async () => {
      const record = await readStubRecord(recordPath);
      expect(record.filter((r) => r.event === "refused").map((r) => `${r.component}: ${String(r.message)}`)).toEqual([]);
      const events = record.map((r) => `${r.component} ${r.event}`);
      for (const expected of [
        "kube-apiserver checked",
        "kube-apiserver etcd-healthy",
        "kube-apiserver serving",
        "kube-controller-manager apiserver-ready",
        "kube-controller-manager serving",
        "kube-scheduler apiserver-ready",
        "kube-scheduler serving",
      ]) {
        expect(events).toContain(expected);
      }
    }, { timeoutMs: 30_000 });
    const record = await readStubRecord(recordPath);
    // The components asked for /readyz as themselves.
    const readyz = record.filter((r) => r.event === "request" && r.path === "/readyz").map((r) => r.user);
    expect(readyz).toContain("system:kube-controller-manager");
    expect(readyz).toContain("system:kube-scheduler");
    // A client without a certificate of the cluster's Kubernetes CA is refused at the TLS layer.
    const stranger = createKubernetesPKI();
    const refused = await fetch(`https://${ADDRESS}:6443/readyz`, {
      tls: { ca: toPem(pki.ca.certificate), cert: toPem(stranger.admin.certificate), key: privateKeyPem(stranger.admin.privateKey) },
    } as RequestInit).then(
      (r) => `answered ${r.status}`,
      (e: Error) => `failed: ${e.message}`,
    );
    expect(refused).toStartWith("failed");
    const ok = await fetch(`https://${ADDRESS}:6443/readyz`, {
      tls: { ca: toPem(pki.ca.certificate), cert: toPem(pki.admin.certificate), key: privateKeyPem(pki.admin.privateKey) },
    } as RequestInit);
    expect(await ok.text()).toBe("ok");
    for (const child of [apiserver, controllerManager, scheduler]) child.kill("SIGTERM");
    expect(await Promise.all([apiserver.exited, controllerManager.exited, scheduler.exited])).toEqual([0, 0, 0]);
  }, 60_000);

  test("the reconciler creates the base bindings through @kubernetes/client-node, leaves them the second time, and replaces one whose role differs", async () => {
    const apiserver = start("kube-apiserver", apiserverArgs(flagOptions()));
    const url = `https://${ADDRESS}:6443`;
    try {
      await eventually(async () => expect(await answersOk(`${url}/readyz`, { ca: pki.ca.certificate, client: pki.admin })).toBe(true), { timeoutMs: 30_000 });
      expect(await reconcile(url, pki)).toEqual({ "nodecore:owner-cluster-admin": "created", "nodecore:apiserver-kubelet-api-admin": "created" });
      expect(await reconcile(url, pki)).toEqual({ "nodecore:owner-cluster-admin": "unchanged", "nodecore:apiserver-kubelet-api-admin": "unchanged" });
      // Someone pointed the owner's binding at another role.
      const path = `${url}/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/nodecore:owner-cluster-admin`;
      const tls = { ca: toPem(pki.ca.certificate), cert: toPem(pki.admin.certificate), key: privateKeyPem(pki.admin.privateKey) };
      const changed = { ...bindingObject(BASE_BINDINGS[0]!), roleRef: { kind: "ClusterRole", apiGroup: "rbac.authorization.k8s.io", name: "view" } };
      expect((await fetch(path, { method: "PUT", body: JSON.stringify(changed), tls } as RequestInit)).status).toBe(200);
      expect(await reconcile(url, pki)).toEqual({ "nodecore:owner-cluster-admin": "replaced", "nodecore:apiserver-kubelet-api-admin": "unchanged" });
      const stored = (await (await fetch(path, { tls } as RequestInit)).json()) as { roleRef: { name: string }; subjects: { name: string }[] };
      expect(stored.roleRef.name).toBe("cluster-admin");
      expect(stored.subjects.map((s) => s.name)).toEqual(["nodecore:owner"]);
      // Every write was made as the node core's admin identity.
      const writes = (await readStubRecord(recordPath)).filter((r) => r.event === "request" && r.method !== "GET" && String(r.path).includes("clusterrolebindings"));
      expect(new Set(writes.map((r) => `${String(r.user)} ${(r.groups as string[]).join(",")}`))).toEqual(new Set(["nodecore:admin system:masters"]));
    } finally {
      apiserver.kill("SIGTERM");
      await apiserver.exited;
    }
  }, 60_000);

  test("a kubelet is pointed at an apiserver that answers, and starts over when it stops answering", async () => {
    const apiserver = start("kube-apiserver", apiserverArgs(flagOptions()));
    const url = `https://${ADDRESS}:6443`;
    const nowhere = "https://127.0.42.9:6443";
    const key = generateKeyPair();
    const { client } = issueKubeletCertificates(pki, "node-00000000000000bb", key.publicKey, ["127.0.42.3"]);
    const identity = { ca: pki.ca.certificate, client: { certificate: client, privateKey: key.privateKey } };
    // A stand-in for the kubelet binary that only waits: this test is about the service around it.
    const fakeBin = join(dir.path, "fake-kubelet-bin");
    mkdirSync(fakeBin, { recursive: true });
    writeFileSync(join(fakeBin, "kubelet"), "#!/bin/sh\n# test fake: waits, serves nothing\nexec sleep 300\n", { mode: 0o755 });
    const containerdReady = new Value<boolean>();
    containerdReady.set(true);
    const { logger, entries } = captureLogger("root");
    let supervisor: Supervisor | undefined;
    try {
      await eventually(async () => expect(await answersOk(`${url}/readyz`, identity)).toBe(true), { timeoutMs: 30_000 });
      expect(await chooseApiserver([nowhere, url], identity)).toBe(url);
      expect(await chooseApiserver([nowhere], identity)).toBeUndefined();
      const kubelet = kubeletService({
        nodeId: "node-00000000000000bb",
        address: "127.0.42.3",
        binDir: fakeBin,
        dir: join(dir.path, "kubelet-files"),
        rootDir: join(dir.path, "kubelet-root"),
        keyFile: join(dir.path, "kubelet.key"),
        containerdSocket: join(dir.path, "containerd.sock"),
        containerdReady,
        cgroupRoot: "/nodecore-test/pods",
        // The curator's answer, over the key the service made: a dead controller listed first.
        issue: async (publicKey) => {
          const issued = issueKubeletCertificates(pki, "node-00000000000000bb", publicKeyFromRaw(publicKey), ["127.0.42.3"]);
          return { ca: pki.ca.certificate, ...issued, apiservers: [nowhere, url] };
        },
        report: () => {},
        apiserverCheck: { intervalMs: 100, misses: 2 },
      });
      supervisor = supervise(
        async (ctx) => {
          ctx.run("kubelet", kubelet);
          await untilCancelled(ctx.signal);
        },
        { logger, backoff: { initialMs: 50, multiplier: 1.5, maxMs: 500, jitter: 0 } },
      );
      // The service wrote a kubeconfig for the controller that answers.
      await eventually(() => expect(parseKubeconfig(readFileSync(join(dir.path, "kubelet-files", "kubelet.kubeconfig"), "utf8")).server).toBe(url));
      apiserver.kill("SIGTERM");
      await apiserver.exited;
      await eventually(() =>
        expect(entries.some((e) => e.message === "restart requested" && String(e.fields.reason).includes(`apiserver ${url} stopped answering /readyz (2 checks in a row); choosing again`))).toBe(true),
      );
      // Starting over finds no apiserver that answers, and says so.
      await eventually(() => expect(entries.some((e) => String(e.fields.error ?? e.fields.reason ?? "").includes(`no apiserver answers /readyz (tried ${nowhere}, ${url})`))).toBe(true));
    } finally {
      await supervisor?.stop();
      apiserver.kill("SIGKILL");
    }
  }, 60_000);

  test("refuses a command line without a flag a secure setup needs, naming it", async () => {
    const args = apiserverArgs(flagOptions()).filter((a) => !a.startsWith("--kubelet-certificate-authority="));
    expect(await refusal("kube-apiserver", args)).toContain("--kubelet-certificate-authority is required for a secure setup");
    const noNode = apiserverArgs(flagOptions()).map((a) => (a.startsWith("--authorization-mode=") ? "--authorization-mode=RBAC" : a));
    expect(await refusal("kube-apiserver", noNode)).toContain("--authorization-mode=RBAC: must include Node");
    expect(await refusal("kube-scheduler", [...schedulerArgs(flagOptions()), "--no-such-flag=1"])).toContain("unknown flag --no-such-flag");
  });

  test("refuses certificates that chain to the wrong CA or name the wrong user", async () => {
    // The front proxy's CA replaced by the Kubernetes CA: any client could then pass as the proxy.
    const sameCA = join(dir.path, "same-ca.crt");
    writeFileSync(sameCA, toPem(pki.ca.certificate));
    const args = apiserverArgs(flagOptions()).map((a) => (a.startsWith("--requestheader-client-ca-file=") ? `--requestheader-client-ca-file=${sameCA}` : a));
    expect(await refusal("kube-apiserver", args)).toContain("--proxy-client-cert-file: CN=front-proxy-client is not signed by");
    // The controller-manager given the scheduler's kubeconfig.
    const swapped = controllerManagerArgs(flagOptions()).map((a) => a.replace(CONTROLLER_FILES.controllerManagerKubeconfig, CONTROLLER_FILES.schedulerKubeconfig));
    expect(await refusal("kube-controller-manager", swapped)).toContain("client certificate is system:kube-scheduler; kube-controller-manager must be system:kube-controller-manager");
    // An apiserver certificate that does not name the address it advertises.
    const elsewhere = apiserverArgs({ ...flagOptions(), address: "127.0.42.2" });
    expect(await refusal("kube-apiserver", elsewhere)).toContain("--tls-cert-file: does not name 127.0.42.2");
  });
});
