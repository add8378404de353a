// out/ctl (run from source) against a real one-node cluster: etcd and a
// curator on loopback.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { readFileSync, statSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { formatEndpoint } from "../internal/curator/client/mod.ts";
import { startImpostorCurator, startTestCluster, type TestCluster } from "../internal/curator/test_cluster.ts";
import { privateKeyPem, generateKeyPair, issueNodeCertificate } from "../internal/pki/mod.ts";
import { tempDir } from "../internal/testing/mod.ts";

const CTL = join(import.meta.dir, "..", "cmd", "ctl", "main.ts");
let cluster: TestCluster;
const config = tempDir("nodecore-ctl-");

beforeAll(async () => {
  cluster = await startTestCluster();
}, 60_000);

afterAll(async () => {
  await cluster?.close();
  config[Symbol.dispose]();
});

/** Runs ctl asynchronously: the curator it talks to lives in this process. */
async function ctl(...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = Bun.spawn([process.execPath, CTL, "--config", config.path, ...args], { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

describe("ctl", () => {
  test("without credentials it says to take ownership first", async () => {
    const result = await ctl("node", "list");
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("run 'ctl takeownership <node address>' first");
  });

  test("takeownership with the wrong key is refused with the reason", async () => {
    const wrong = join(config.path, "wrong.key");
    writeFileSync(wrong, privateKeyPem(generateKeyPair().privateKey));
    const result = await ctl("--owner-key", wrong, "takeownership", cluster.target);
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("the presented key is not the cluster owner's key [PERMISSION_DENIED]");
  });

  test("takeownership with the owner key saves credentials, and the node list shows the node UP with the consensus role", async () => {
    writeFileSync(join(config.path, "owner.key"), privateKeyPem(cluster.ownerKey.privateKey), { mode: 0o600 });
    const taken = await ctl("takeownership", cluster.target);
    expect(taken.stderr).toBe(`ctl: proving the owner key to ${cluster.target} ...\n`);
    expect(taken.stdout).toContain(`curators: ${cluster.node.id}@${cluster.target}`);
    expect(taken.code).toBe(0);

    const table = await ctl("node", "list");
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(new RegExp(`^NODE\\s+STATE\\s+ADDRESS\\s+ROLES\\n${cluster.node.id}\\s+UP\\s+${cluster.host}\\s+consensus,kubernetes-controller$`, "m"));
    const json = JSON.parse((await ctl("node", "list", "--json")).stdout);
    expect(json).toEqual([expect.objectContaining({ id: cluster.node.id, state: "UP", roles: ["consensus", "kubernetes-controller"], curator: true })]);
  });

  test("ticket, cluster info and roles work; refusals show their code", async () => {
    expect((await ctl("ticket")).stdout.trim()).toMatch(/^[0-9a-f]{32}$/);
    expect((await ctl("cluster", "info")).stdout).toContain("CA fingerprint (SHA-256): " + cluster.clusterCA.certificate.fingerprint256);
    // cluster info saved the directory's curators, each with the node that must answer there.
    expect(readFileSync(join(config.path, "endpoints"), "utf8")).toBe(`${cluster.node.id}@${cluster.target}\n`);
    const set = await ctl("node", "roles", "set", cluster.node.id, "kubernetes-worker");
    expect(set.stdout.trim()).toBe(`set kubernetes-worker on ${cluster.node.id}`);
    expect((await ctl("node", "list")).stdout).toContain("consensus,kubernetes-controller,kubernetes-worker");
    const unknown = await ctl("node", "approve", "node-ffffffffffffffff");
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toContain("node node-ffffffffffffffff not found [NOT_FOUND]");
    const badRole = await ctl("node", "roles", "set", cluster.node.id, "wizard");
    expect(badRole.code).toBe(2);
    expect(badRole.stderr).toContain("unknown role 'wizard'");
  });

  test("an unreachable cluster is reported with every endpoint tried", async () => {
    writeFileSync(join(config.path, "endpoints"), "127.0.0.1:1\n");
    const result = await ctl("--timeout", "3000", "node", "list");
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("ctl: no curator answered (1 tried): 127.0.0.1:1: connection failed");
    writeFileSync(join(config.path, "endpoints"), `${cluster.target}\n`);
  });

  test("a fake curator holding a genuine node certificate is refused, and gets no call", async () => {
    const key = generateKeyPair();
    const impostor = await startImpostorCurator(
      { key, certificate: issueNodeCertificate(cluster.clusterCA, key.publicKey, { ipAddresses: ["127.0.0.1"] }) },
      cluster.clusterCA.certificate,
    );
    try {
      // As if the impostor had got itself into the owner's endpoints.
      writeFileSync(join(config.path, "endpoints"), `${impostor.endpoint.host}:${impostor.endpoint.port}\n`);
      const approve = await ctl("node", "approve", cluster.node.id);
      expect(approve.code).toBe(1);
      expect(approve.stdout).toBe("");
      expect(approve.stderr).toContain("ctl: no curator could be trusted (1 tried): ");
      expect(approve.stderr).toContain("not a curator certificate");
      const list = await ctl("node", "list");
      expect(list.code).toBe(1);
      expect(list.stdout).not.toContain("node-0000000000000bad");
      expect(impostor.calls).toEqual([]);
    } finally {
      impostor.close();
      writeFileSync(join(config.path, "endpoints"), `${formatEndpoint(cluster.endpoint)}\n`);
    }
  });

  test("register parameters, which carry the ticket, are readable by their owner only", async () => {
    const file = join(config.path, "register.pb");
    const result = await ctl("params", "register", file);
    expect(result.code).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  test("genkey refuses to overwrite an owner key", async () => {
    const result = await ctl("genkey");
    expect(result.code).toBe(1);
    expect(result.stderr).toContain("an owner key already exists");
  });
});
