// out/ctl (run from source) against a real one-node cluster: etcd and a
// curator on loopback; and a corpus of bad command lines and bad config
// files, each of which must fail with one line that names its cause.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { X509Certificate } from "node:crypto";
import { BackupWriter, decryptBackup } from "../internal/backup/mod.ts";
import { readOwnerKey } from "../internal/operator/mod.ts";
import { createServer as createNetServer, type AddressInfo } from "node:net";
import { join } from "node:path";
import type { DescService } from "@bufbuild/protobuf";
import { Management } from "../proto/gen/api/management_pb.ts";
import { Curator } from "../proto/gen/curator/curator_pb.ts";
import { formatEndpoint, type CuratorEndpoint } from "../internal/curator/client/mod.ts";
import { startImpostorCurator, startTestCluster, type TestCluster } from "../internal/curator/test_cluster.ts";
import {
  createClusterCA,
  generateKeyPair,
  issueCuratorCertificate,
  issueNodeCertificate,
  issueOwnerCertificate,
  nodeIdFromPublicKey,
  privateKeyPem,
  rawPrivateKey,
  rawPublicKey,
  type CA,
} from "../internal/pki/mod.ts";
import { addService, createServer, listen, serverCredentials, type ServiceImpl, type ServicePolicy } from "../internal/rpc/mod.ts";
import { tempDir } from "../internal/testing/mod.ts";

const CTL = join(import.meta.dir, "..", "cmd", "ctl", "main.ts");
let cluster: TestCluster;
const config = tempDir("nodecore-ctl-");

beforeAll(async () => {
  cluster = await startTestCluster();
}, 120_000);

afterAll(async () => {
  await cluster?.close();
  config[Symbol.dispose]();
});

/** Runs ctl asynchronously (the curator it talks to lives in this process), with `dir` as its config dir. */
async function ctlIn(dir: string, ...args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  const child = Bun.spawn([process.execPath, CTL, "--config", dir, ...args], { stdout: "pipe", stderr: "pipe" });
  const [stdout, stderr, code] = await Promise.all([new Response(child.stdout).text(), new Response(child.stderr).text(), child.exited]);
  return { code, stdout, stderr };
}

const ctl = (...args: string[]) => ctlIn(config.path, ...args);

/** Sets the owner's endpoints file for the duration of `body`. */
async function withEndpoints<T>(line: string, body: () => Promise<T>): Promise<T> {
  writeFileSync(join(config.path, "endpoints"), `${line}\n`);
  try {
    return await body();
  } finally {
    writeFileSync(join(config.path, "endpoints"), `${formatEndpoint(cluster.endpoint)}\n`);
  }
}

/**
 * An address of the loopback block that no other test listens on: a port
 * freed on 127.0.0.1 was taken by another file's server in the parallel
 * suite once, and the "refused" connection was answered.
 */
const UNUSED_LOOPBACK = "127.0.7.254";

/** A port of UNUSED_LOOPBACK that nothing listens on. */
async function closedPort(): Promise<number> {
  const server = createNetServer();
  await new Promise<void>((resolve) => server.listen(0, UNUSED_LOOPBACK, resolve));
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

/**
 * A genuine curator (a curator certificate under the cluster CA for
 * 127.0.0.1) that takes every call and never answers it.
 */
async function startSilentCurator(ca: CA): Promise<{ endpoint: CuratorEndpoint; close(): void }> {
  const key = generateKeyPair();
  const server = createServer();
  const hang = (signal: AbortSignal) => new Promise<never>((_, reject) => signal.addEventListener("abort", () => reject(signal.reason), { once: true }));
  const silent = <S extends DescService>(service: S) => {
    const impl: Record<string, unknown> = {};
    const policy: Record<string, string> = {};
    for (const method of service.methods) {
      policy[method.localName] = "key";
      impl[method.localName] =
        method.methodKind === "unary"
          ? (_: unknown, ctx: { signal: AbortSignal }) => hang(ctx.signal)
          : async function* (_: unknown, ctx: { signal: AbortSignal }) {
              yield await hang(ctx.signal);
            };
    }
    addService(server, service, impl as ServiceImpl<S>, { ca: () => ca.certificate, policy: policy as ServicePolicy<S> });
  };
  silent(Management);
  const certificate = issueCuratorCertificate(ca, key.publicKey, { address: "127.0.0.1", validForMs: 3600_000 });
  const { port } = await listen(server, "127.0.0.1:0", serverCredentials({ certificate, privateKey: key.privateKey }));
  return { endpoint: { host: "127.0.0.1", port, nodeId: nodeIdFromPublicKey(rawPublicKey(key.publicKey)) }, close: () => server.forceShutdown() };
}

/** What every failure must look like: one line on stderr that starts "ctl: ", no stack frames, no source. */
function expectOneLineError(result: { code: number; stderr: string }, code: 1 | 2, cause: string | RegExp): void {
  const lines = result.stderr.split("\n").filter((l) => l !== "");
  // stderr rides along so that a failure shows what ctl said.
  expect({ code: result.code, lines: lines.length, stderr: result.stderr }).toEqual({ code, lines: 1, stderr: result.stderr });
  expect(result.stderr).toStartWith("ctl: ");
  expect(result.stderr).not.toMatch(/^\s+at |\bat .*:\d+:\d+|^\s*\d+ \| /m);
  if (typeof cause === "string") expect(result.stderr).toContain(cause);
  else expect(result.stderr).toMatch(cause);
}

describe("ctl", () => {
  test("without credentials it says to take ownership first", async () => {
    const result = await ctl("node", "list");
    expectOneLineError(result, 1, "run 'ctl takeownership <node address>' first");
  });

  test("takeownership with the wrong key is refused with the reason", async () => {
    const wrong = join(config.path, "wrong.key");
    writeFileSync(wrong, privateKeyPem(generateKeyPair().privateKey));
    const result = await ctl("--owner-key", wrong, "takeownership", cluster.target);
    expectOneLineError(result, 1, "the presented key is not the cluster owner's key [PERMISSION_DENIED]");
  });

  test("takeownership with the owner key saves credentials, and the node list shows the node UP with the consensus role", async () => {
    writeFileSync(join(config.path, "owner.key"), privateKeyPem(cluster.ownerKey.privateKey), { mode: 0o600 });
    const taken = await ctl("takeownership", cluster.target);
    // Progress goes to a terminal only; here stderr is a pipe.
    expect(taken.stderr).toBe("");
    expect(taken.stdout).toContain(`curators: ${cluster.node.id}@${cluster.target}`);
    expect(taken.code).toBe(0);

    const table = await ctl("node", "list");
    expect(table.code).toBe(0);
    // No heartbeats here (no role server runs): health is UNKNOWN, or HEARTBEAT_TIMEOUT after the grace period.
    expect(table.stdout).toMatch(
      new RegExp(
        `^NODE\\s+STATE\\s+HEALTH\\s+LAST SEEN\\s+ADDRESS\\s+ROLES\\s+LABELS\\n${cluster.node.id}\\s+UP\\s+(UNKNOWN|HEARTBEAT_TIMEOUT)\\s+-\\s+${cluster.host}\\s+consensus,kubernetes-controller\\s+-$`,
        "m",
      ),
    );
    const json = JSON.parse((await ctl("node", "list", "--json")).stdout);
    expect(json).toEqual([expect.objectContaining({ id: cluster.node.id, state: "UP", roles: ["consensus", "kubernetes-controller"], curator: true })]);
  });

  test("ticket, cluster info and roles work; refusals show their code", async () => {
    expect((await ctl("ticket")).stdout.trim()).toMatch(/^[0-9a-f]{32}$/);
    const info = (await ctl("cluster", "info")).stdout;
    expect(info).toContain("CA fingerprint (SHA-256): " + cluster.clusterCA.certificate.fingerprint256);
    // Who leads: one node, so it leads both.
    expect(info).toContain(`curator leader: ${cluster.node.id}\netcd raft leader: ${cluster.node.id}\n`);
    // cluster info saved the directory's curators, each with the node that must answer there.
    expect(readFileSync(join(config.path, "endpoints"), "utf8")).toBe(`${cluster.node.id}@${cluster.target}\n`);
    const set = await ctl("node", "roles", "set", cluster.node.id, "kubernetes-worker");
    expect(set.stdout.trim()).toBe(`set kubernetes-worker on ${cluster.node.id}`);
    expect((await ctl("node", "list")).stdout).toContain("consensus,kubernetes-controller,kubernetes-worker");
    expectOneLineError(await ctl("node", "approve", "node-ffffffffffffffff"), 1, "node node-ffffffffffffffff not found [NOT_FOUND]");
    expectOneLineError(await ctl("node", "roles", "set", cluster.node.id, "wizard"), 2, "unknown role 'wizard'");
  });

  test("labels are set and removed kubectl-style, shown in the node list, and bad ones refused with why", async () => {
    const set = await ctl("node", "label", cluster.node.id, "zone=a", "example.com/rack=7");
    expect(set.stdout.trim()).toBe(`labels of ${cluster.node.id}: example.com/rack=7, zone=a`);
    expect((await ctl("node", "list")).stdout).toMatch(/\sexample\.com\/rack=7,zone=a\n$/);
    const changed = await ctl("node", "label", cluster.node.id, "zone-", "empty=");
    expect(changed.stdout.trim()).toBe(`labels of ${cluster.node.id}: empty=, example.com/rack=7`);
    expectOneLineError(await ctl("node", "label", cluster.node.id, "bad!=x"), 1, "upsert[0].key: 'bad!': the name must be");
    await ctl("node", "label", cluster.node.id, "empty-", "example.com/rack-");
  });

  test("cluster backup writes the owner-encrypted snapshot once; check-backup reads it with the owner key and refuses another key, a cut-off copy and a damaged one with why", async () => {
    const file = join(config.path, "cluster.backup");
    const taken = await ctl("cluster", "backup", file);
    expect(taken.stderr).toBe("");
    expect(taken.code).toBe(0);
    expect(taken.stdout).toMatch(new RegExp(`^backup written to ${file} \\(\\d+ bytes\\)\\ncluster CA \\(SHA-256\\): ${cluster.clusterCA.certificate.fingerprint256}\\netcd revision: [1-9]\\d*\\n`));
    expect(statSync(file).mode & 0o777).toBe(0o600);
    // Nothing of the cluster's keys in clear: the CA's certificate is in etcd, and not in the file.
    expect(readFileSync(file).includes(Buffer.from(cluster.clusterCA.certificate.raw))).toBe(false);
    expectOneLineError(await ctl("cluster", "backup", file), 1, `${file} exists: a backup never overwrites a file`);
    const checked = await ctl("cluster", "check-backup", file);
    expect(checked.stdout).toContain(`: readable with this owner key, etcd's checksum matches (`);
    expect(checked.stdout).toContain(` bytes of database), signed by this cluster's CA (${cluster.clusterCA.certificate.fingerprint256})\n`);
    expect(checked.stdout).toContain("nodes: ");
    const stranger = join(config.path, "stranger.key");
    writeFileSync(stranger, privateKeyPem(generateKeyPair().privateKey), { mode: 0o600 });
    expectOneLineError(await ctl("cluster", "check-backup", file, "--owner-key", stranger), 1, `${file}: it is encrypted to another owner key (`);
    const bytes = readFileSync(file);
    const cut = join(config.path, "cut.backup");
    writeFileSync(cut, bytes.subarray(0, bytes.length - 100));
    expectOneLineError(await ctl("cluster", "check-backup", cut), 1, `${cut}: it does not end with its signature (truncated)`);
    const damaged = join(config.path, "damaged.backup");
    const flipped = Buffer.from(bytes);
    flipped[flipped.length - 200]! ^= 1;
    writeFileSync(damaged, flipped);
    expectOneLineError(await ctl("cluster", "check-backup", damaged), 1, `${damaged}: frame `);
  });

  test("a forged backup (this cluster's snapshot, its header naming this CA, encrypted to the owner, signed by another CA) is refused by check-backup and params restore; without a pinned CA, check-backup says it checked nothing of whose it is", async () => {
    const file = join(config.path, "cluster.backup");
    const owner = readOwnerKey(join(config.path, "owner.key"));
    const { header, snapshot } = decryptBackup(readFileSync(file), rawPrivateKey(owner.privateKey));
    // Any key but the CA's: another cluster's CA key, say.
    const forgerKey = generateKeyPair();
    const writer = new BackupWriter(
      rawPublicKey(owner.publicKey),
      { caFingerprint: header.caFingerprint, etcdRevision: header.etcdRevision, createdAt: header.createdAt, nodeCount: header.nodeCount, nodecoreVersion: header.nodecoreVersion },
      forgerKey.privateKey,
    );
    const forged = join(config.path, "forged.backup");
    writeFileSync(forged, Buffer.concat([writer.push(snapshot), writer.finish()]));
    const why = "it was not written by this cluster, or was changed since";
    const refused = await ctl("cluster", "check-backup", forged);
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`${forged}: its signature is not by the pinned cluster CA's key: ${why}`);
    const params = join(config.path, "forged.pb");
    const restore = await ctl("params", "restore", forged, params);
    expect(restore.code).toBe(1);
    expect(restore.stderr).toContain(why);
    expect(existsSync(params)).toBe(false);
    // Another directory: the owner key alone, no ca.crt.
    const bare = join(config.path, "bare");
    mkdirSync(bare, { recursive: true });
    writeFileSync(join(bare, "owner.key"), readFileSync(join(config.path, "owner.key")), { mode: 0o600 });
    const unpinned = await ctlIn(bare, "cluster", "check-backup", forged);
    expect(unpinned.code).toBe(0);
    expect(unpinned.stdout).toContain("NOT checked for which cluster wrote it: no pinned CA here (ca.crt), give it with --ca");
    expectOneLineError(await ctlIn(bare, "params", "restore", forged, params), 1, "no pinned cluster CA: a restore needs the CA the backup must be signed by");
    // --ca names it: the real backup passes, the forged one does not.
    expect((await ctlIn(bare, "cluster", "check-backup", file, "--ca", join(config.path, "ca.crt"))).stdout).toContain("signed by this cluster's CA");
    expect((await ctlIn(bare, "cluster", "check-backup", forged, "--ca", join(config.path, "ca.crt"))).code).toBe(1);
  });

  test("takeownership refuses a cluster whose CA is not the pinned one, saving nothing, unless told to replace it", async () => {
    const other = join(config.path, "other-owner");
    mkdirSync(other, { recursive: true });
    for (const name of ["owner.key", "owner.crt", "endpoints"]) writeFileSync(join(other, name), readFileSync(join(config.path, name)), { mode: 0o600 });
    const foreign = createClusterCA(generateKeyPair());
    writeFileSync(join(other, "ca.crt"), foreign.toString());
    const refused = await ctlIn(other, "takeownership", formatEndpoint(cluster.endpoint));
    expect(refused.code).toBe(1);
    expect(refused.stderr).toContain(`has CA ${cluster.clusterCA.certificate.fingerprint256}, not the CA pinned in ${join(other, "ca.crt")} (${foreign.fingerprint256}): nothing was saved`);
    expect(readFileSync(join(other, "ca.crt"), "utf8")).toBe(foreign.toString());
    const replaced = await ctlIn(other, "takeownership", formatEndpoint(cluster.endpoint), "--replace-ca");
    expect(replaced.code).toBe(0);
    expect(replaced.stderr).toContain(`replacing the pinned CA ${foreign.fingerprint256} with ${cluster.clusterCA.certificate.fingerprint256} (--replace-ca)`);
    expect(new X509Certificate(readFileSync(join(other, "ca.crt"))).fingerprint256).toBe(cluster.clusterCA.certificate.fingerprint256);
  });

  test("cluster recover names a survivor the config has no curator of, or a malformed one, in one line, and calls nothing", async () => {
    expectOneLineError(
      await ctl("cluster", "recover", "--from", "node-0123456789abcdef", "--yes"),
      1,
      `--from node-0123456789abcdef: the ctl config lists no curator of that node (it lists ${cluster.node.id}); give its address as node-0123456789abcdef@<address>`,
    );
    expectOneLineError(await ctl("cluster", "recover", "--from", "somehost", "--yes"), 1, "--from somehost: name the surviving node by its ID (node- and 16 hex digits), optionally as node-…@address");
    expectOneLineError(await ctl("cluster", "recover", "--from", "node-01@10.0.0.1", "--yes"), 1, "--from node-01@10.0.0.1: 'node-01@10.0.0.1': 'node-01' is not a node ID");
  });

  test("approve approves a NEW node, and says so when the node is approved already", async () => {
    const key = generateKeyPair();
    const id = nodeIdFromPublicKey(rawPublicKey(key.publicKey));
    const ticket = Buffer.from((await ctl("ticket")).stdout.trim(), "hex");
    const curator = cluster.client(Curator, { kind: "self-signed", key });
    try {
      await curator.registerNode({ registerTicket: ticket, joinKey: rawPublicKey(generateKeyPair().publicKey) });
    } finally {
      curator.close();
    }
    const approved = await ctl("node", "approve", id);
    expect({ code: approved.code, stdout: approved.stdout.trim() }).toEqual({ code: 0, stdout: `approved ${id} (now STANDBY)` });
    const again = await ctl("node", "approve", id);
    expect({ code: again.code, stdout: again.stdout.trim() }).toEqual({ code: 0, stdout: `${id} is STANDBY already: nothing to approve` });
    const up = await ctl("node", "approve", cluster.node.id);
    expect({ code: up.code, stdout: up.stdout.trim() }).toEqual({ code: 0, stdout: `${cluster.node.id} is UP already: nothing to approve` });
    expect(JSON.parse((await ctl("node", "approve", cluster.node.id, "--json")).stdout)).toEqual({ node: cluster.node.id, before: "UP", after: "UP", approved: false });
  });

  test("a refused connection is reported as refused, at its address", async () => {
    const port = await closedPort();
    const at = `${UNUSED_LOOPBACK}:${port}`;
    const result = await withEndpoints(at, () => ctl("node", "list"));
    expectOneLineError(result, 1, `ctl: no curator answered (1 tried): ${at}: connection refused at ${at}`);
    const taken = await ctl("takeownership", at);
    expectOneLineError(taken, 1, `ctl: could not reach ${at}: connection refused at ${at}`);
  });

  test("a curator whose certificate the saved CA does not trust (an earlier cluster's credentials) is named as such", async () => {
    const otherKey = generateKeyPair();
    const other: CA = { certificate: createClusterCA(otherKey), privateKey: otherKey.privateKey };
    const key = generateKeyPair();
    const relaunched = await startImpostorCurator({ key, certificate: issueCuratorCertificate(other, key.publicKey, { address: "127.0.0.1", validForMs: 3600_000 }) }, other.certificate);
    try {
      const result = await withEndpoints(`${relaunched.endpoint.host}:${relaunched.endpoint.port}`, () => ctl("node", "list"));
      expectOneLineError(result, 1, "ctl: no curator could be trusted (1 tried): ");
      expect(result.stderr).toContain("its certificate is not signed by the cluster CA");
      expect(result.stderr).toContain(`the curator's certificate is not trusted by the saved CA (${join(config.path, "ca.crt")})`);
      expect(result.stderr).toContain("run 'ctl takeownership <node address>' again");
      expect(relaunched.calls).toEqual([]);
    } finally {
      relaunched.close();
    }
  });

  test("a curator that does not answer within --timeout is reported as a deadline", async () => {
    const silent = await startSilentCurator(cluster.clusterCA);
    try {
      const result = await withEndpoints(formatEndpoint(silent.endpoint), () => ctl("--timeout", "300", "node", "list"));
      // The time is grpc-js's own measure, so a loaded ctl may print more than 0.3 s, never less.
      expectOneLineError(result, 1, /deadline exceeded: no answer within \d+(\.\d)? s/);
      const seconds = Number(/no answer within (\d+(?:\.\d)?) s/.exec(result.stderr)![1]);
      expect(seconds).toBeGreaterThanOrEqual(0.3);
      expect(seconds).toBeLessThan(10);
    } finally {
      silent.close();
    }
  });

  test("a fake curator holding a genuine node certificate is refused, and gets no call", async () => {
    const key = generateKeyPair();
    const impostor = await startImpostorCurator({ key, certificate: issueNodeCertificate(cluster.clusterCA, key.publicKey, { ipAddresses: ["127.0.0.1"] }) }, cluster.clusterCA.certificate);
    try {
      // As if the impostor had got itself into the owner's endpoints.
      const [approve, list] = await withEndpoints(`${impostor.endpoint.host}:${impostor.endpoint.port}`, async () => [await ctl("node", "approve", cluster.node.id), await ctl("node", "list")]);
      expectOneLineError(approve!, 1, "ctl: no curator could be trusted (1 tried): ");
      expect(approve!.stdout).toBe("");
      expect(approve!.stderr).toContain("not a curator certificate");
      expect(list!.code).toBe(1);
      expect(list!.stdout).not.toContain("node-0000000000000bad");
      expect(impostor.calls).toEqual([]);
    } finally {
      impostor.close();
    }
  });

  test("register parameters, which carry the ticket, are readable by their owner only", async () => {
    const file = join(config.path, "register.pb");
    const result = await ctl("params", "register", file);
    expect(result.code).toBe(0);
    expect(statSync(file).mode & 0o777).toBe(0o600);
  });

  test("genkey refuses to overwrite an owner key", async () => {
    expectOneLineError(await ctl("genkey"), 1, "an owner key already exists");
  });

  test("ctl help is --help; -o json and --output json are --json; a node is found by a unique prefix of its ID or its name label", async () => {
    expect((await ctl("help", "node")).stdout).toBe((await ctl("node", "--help")).stdout);
    expect((await ctl("help")).stdout).toBe((await ctl("--help")).stdout);
    // The three listings are taken one after another, and a node's health
    // and how long ago it was heard from move on between them (a node
    // without heartbeats turns from UNKNOWN to HEARTBEAT_TIMEOUT): those
    // are left out of the comparison, whose point is the format.
    const listing = async (...flags: string[]) =>
      (JSON.parse((await ctl("node", "list", ...flags)).stdout) as Record<string, unknown>[]).map(({ health: _h, healthReason: _r, lastSeenMs: _s, clockOffsetMs: _c, ...rest }) => rest);
    const asJson = await listing("--json");
    expect(await listing("-o", "json")).toEqual(asJson);
    expect(await listing("--output", "json")).toEqual(asJson);
    expect(asJson.some((n) => n.id === cluster.node.id)).toBe(true);

    const id = cluster.node.id;
    const byPrefix = await ctl("node", "label", id.slice(0, 9), "name=first");
    expect(byPrefix.stderr).toBe("");
    expect(byPrefix.stdout.trim()).toBe(`labels of ${id}: name=first`);
    const byName = await ctl("node", "label", "first", "zone=b");
    expect(byName.stdout.trim()).toBe(`labels of ${id}: name=first, zone=b`);
    expect((await ctl("node", "list", "--ids")).stdout).toContain(`${id}\nfirst\n`);
    // describe: the node's record, then the service lines it reports.
    const described = await ctl("node", "describe", "first");
    expect(described.code).toBe(0);
    expect(described.stdout).toMatch(new RegExp(`^Node: +${id}\nState: +UP\n`));
    expect(described.stdout).toContain("\nLabels:      name=first, zone=b\n");
    // This test cluster's node reports no service lines: describe says so.
    expect(described.stdout).toEndWith("\nServices:\n  (none reported)\n");
    expect(JSON.parse((await ctl("node", "describe", id, "--json")).stdout).id).toBe(id);
    expectOneLineError(await ctl("node", "label", "zzz", "a=b"), 1, new RegExp(`the cluster has no node 'zzz' \\(nodes: .*${id} \\(first\\)`));
    await ctl("node", "label", id, "name-", "zone-");
  });

  test("help lists a command's actions, one line each, and completion covers commands, actions and flags", async () => {
    const help = await ctl("node", "--help");
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(
      /^Actions:\n {2}list +\S.*\n {2}describe <node id> +\S.*\n {2}approve <node id> +\S.*\n {2}delete <node id> +\S.*\n {2}reset <node id> +\S.*\n {2}undelete <node id> +\S.*\n {2}logs <node id> \[path\] +\S.*\n {2}services <node id> +\S.*\n {2}reboot <node id> +\S.*\n {2}drain <node id> +\S.*\n {2}uncordon <node id> +\S.*\n {2}update <node id> +\S.*\n {2}rollback <node id> +\S.*\n {2}poweroff <node id> +\S.*\n {2}label <node id> <key=value\|key-\.\.\.> +\S.*\n {2}roles set\|unset <node id> <role\.\.\.> +\S.*$/m,
    );
    const bash = await ctl("completion", "bash");
    expect(bash.code).toBe(0);
    expect(bash.stdout).toContain("complete -F _ctl_complete ctl");
    const zsh = await ctl("completion", "zsh");
    expect(zsh.stdout).toStartWith("#compdef ctl\n");
  });
});

describe("every bad command line and config fails with one line that names its cause", () => {
  // exit 2: mistakes in the command line.
  const usage: [string[], string | RegExp][] = [
    [[], "missing command (commands: version, help, genkey, takeownership, cluster, ticket, node, image, etcd, events, metrics, kubeconfig, params, completion)"],
    [["nod", "list"], "unknown command 'nod' (did you mean 'node'?)"],
    [["x"], "unknown command 'x' (commands: "],
    [["node"], "missing action for node (actions: list, describe, approve, delete, reset, undelete, logs, services, reboot, drain, uncordon, update, rollback, poweroff, label, roles)"],
    [["node", "lst"], "unknown action 'lst' for node (did you mean 'node list'?)"],
    [
      ["node", "frobnicate"],
      "unknown action 'frobnicate' for node (actions: list, describe, approve, delete, reset, undelete, logs, services, reboot, drain, uncordon, update, rollback, poweroff, label, roles)",
    ],
    [["node", "logs"], "missing <node id>: usage: ctl node logs <node id> [path]"],
    [["node", "logs", "node-1", "-n", "abc"], "invalid value 'abc' for -n: not a positive integer (lines)"],
    [["node", "logs", "node-1", "--level", "loud"], "invalid value 'loud' for --level"],
    [["node", "logs", "node-1", "--follw"], "unknown flag '--follw' (did you mean '--follow'?)"],
    [["node", "list", "-f"], "unknown flag '-f'"],
    [["node", "delete"], "missing <node id>: usage: ctl node delete <node id>"],
    [["node", "label", "node-1"], "missing <key=value|key-...>: usage: ctl node label <node id> <key=value|key-...>"],
    [["node", "label", "node-1", "zone"], "'zone' is neither key=value (set a label) nor key- (remove one)"],
    [["node", "label", "node-1", "=a"], "'=a' is neither key=value (set a label) nor key- (remove one)"],
    [["node", "reboot", "a", "b"], "unexpected argument 'b': usage: ctl node reboot <node id>"],
    [["node", "poweroff"], "missing <node id>: usage: ctl node poweroff <node id>"],
    [["node", "list", "--nodez"], "unknown flag '--nodez' (see 'ctl node list --help')"],
    [["--nodez", "node", "list"], "unknown flag '--nodez'"],
    [["node", "list", "--jsn"], "unknown flag '--jsn' (did you mean '--json'?)"],
    [["node", "list", "-z"], "unknown flag '-z'"],
    [["node", "list", "--timeout"], "flag '--timeout' needs a value: --timeout <ms>"],
    [["node", "list", "--timeout", "--json"], "flag '--timeout' needs a value"],
    [["node", "list", "--timeout", "abc"], "invalid value 'abc' for --timeout: not a positive integer (milliseconds)"],
    [["node", "list", "--timeout", "-1"], "invalid value '-1' for --timeout: not a positive integer"],
    [["node", "list", "--timeout=0"], "invalid value '0' for --timeout"],
    [["node", "list", "--timeout", "1.5"], "invalid value '1.5' for --timeout"],
    [["node", "list", "--timeout", "99999999999"], "invalid value '99999999999' for --timeout: more than 2147483647 milliseconds"],
    [["node", "list", "--json=yes"], "flag '--json' takes no value (got '--json=yes')"],
    [["node", "list", "--config"], "flag '--config' needs a value: --config <dir>"],
    [["node", "list", "--config="], "invalid value '' for --config: empty"],
    [["node", "list", "extra"], "unexpected argument 'extra': usage: ctl node list"],
    [["node", "approve"], "missing <node id>: usage: ctl node approve <node id>"],
    [["node", "roles"], "missing set|unset: usage: ctl node roles set|unset <node id> <role...>"],
    [["node", "roles", "set", "node-0123456789abcdef"], "missing <role...>"],
    [["node", "roles", "grant", "node-0123456789abcdef", "consensus"], "unknown operation 'grant' (expected: set, unset)"],
    [["node", "roles", "set", "node-0123456789abcdef", "consensu"], "unknown role 'consensu' (did you mean 'consensus'?"],
    [["takeownership"], "missing <endpoint>: usage: ctl takeownership <endpoint>"],
    [["takeownership", "a", "b"], "unexpected argument 'b'"],
    [["params", "bootstrap"], "missing <file>"],
    [["params", "nonsense", "file"], "unknown action 'nonsense' for params"],
    [["etcd", "credentials"], "missing <dir>"],
    [["cluster", "backup"], "missing <file>: usage: ctl cluster backup <file>"],
    [["cluster", "check-backup"], "missing <file>"],
    [["cluster", "recover"], "missing --from <node>: name the consensus node that survived"],
    [["cluster", "recover", "--from"], "flag '--from' needs a value: --from <node>"],
    [["etcd"], "missing action for etcd (actions: credentials, status, defrag)"],
    [["etcd", "status", "x"], "unexpected argument 'x': usage: ctl etcd status"],
    [["etcd", "defrg"], "unknown action 'defrg' for etcd (did you mean 'etcd defrag'?)"],
    [["completion"], "missing bash|zsh"],
    [["completion", "fish"], "unknown shell 'fish' (expected: bash, zsh)"],
    [["version", "now"], "unexpected argument 'now'"],
    [["nod", "--help"], "unknown command 'nod'"],
    [["node", "update", "node-1"], "--image <dir> is required: the update bundle (bun run image writes out/image/slot)"],
    [["node", "update", "node-1", "--image", "/tmp", "--wait"], "--wait waits for the reboot that --activate starts; pass both, or neither"],
    [["node", "update", "--image", "/tmp"], "missing <node id>: usage: ctl node update <node id>"],
    [["cluster", "update"], "--image <dir> is required"],
    [["cluster", "update", "--image", "/tmp", "--max-unavailable", "0"], "invalid value '0' for --max-unavailable: not a positive integer"],
  ];
  for (const [args, cause] of usage) {
    test(`ctl ${args.join(" ") || "(nothing)"}: exit 2`, async () => {
      expectOneLineError(await ctlIn(config.path, ...args), 2, cause);
    });
  }

  /** A config dir with credentials as takeownership saves them, then `damage` done to it. */
  function damagedConfig(damage: (dir: string) => void): string {
    const dir = join(config.path, `damaged-${crypto.randomUUID()}`);
    mkdirSync(dir);
    const ownerKey = generateKeyPair();
    writeFileSync(join(dir, "owner.key"), privateKeyPem(ownerKey.privateKey), { mode: 0o600 });
    writeFileSync(join(dir, "owner.crt"), issueOwnerCertificate(cluster.clusterCA, ownerKey.publicKey).toString());
    writeFileSync(join(dir, "ca.crt"), cluster.clusterCA.certificate.toString());
    writeFileSync(join(dir, "endpoints"), `${formatEndpoint(cluster.endpoint)}\n`);
    damage(dir);
    return dir;
  }

  // exit 1: the command line is fine, the files or the world are not.
  const runtime: [string, (dir: string) => void, string[], string | RegExp][] = [
    ["a corrupt owner certificate", (d) => writeFileSync(join(d, "owner.crt"), "garbage"), ["node", "list"], /owner certificate \S+\/owner\.crt is not a valid PEM certificate/],
    [
      "a truncated CA certificate",
      (d) => writeFileSync(join(d, "ca.crt"), readFileSync(join(d, "ca.crt"), "utf8").slice(0, 100)),
      ["node", "list"],
      /cluster CA certificate \S+\/ca\.crt is not a valid PEM certificate/,
    ],
    [
      "a corrupt owner key",
      (d) => writeFileSync(join(d, "owner.key"), "-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"),
      ["node", "list"],
      /owner key \S+\/owner\.key is not a valid PEM private key/,
    ],
    [
      "an owner key that owner.crt does not certify",
      (d) => writeFileSync(join(d, "owner.key"), privateKeyPem(generateKeyPair().privateKey)),
      ["node", "list"],
      /owner key \S+\/owner\.key does not match owner certificate \S+\/owner\.crt/,
    ],
    [
      "an owner certificate of another CA",
      (d) => {
        const key = generateKeyPair();
        writeFileSync(join(d, "ca.crt"), createClusterCA(key).toString());
      },
      ["ticket"],
      /owner certificate \S+\/owner\.crt is not signed by the CA in \S+\/ca\.crt/,
    ],
    ["an empty endpoints file", (d) => writeFileSync(join(d, "endpoints"), "\n"), ["ticket"], /endpoints lists no curator endpoints/],
    ["a bad endpoint line", (d) => writeFileSync(join(d, "endpoints"), "10.0.0.1:99999\n"), ["ticket"], /endpoints, line 1: '10\.0\.0\.1:99999': port must be 1-65535/],
    ["a missing CA", (d) => writeFileSync(join(d, "ca.crt"), ""), ["node", "list"], /ca\.crt is not a valid PEM certificate/],
    ["an owner key that is a directory", () => {}, ["--owner-key", "/", "node", "list"], "cannot read /: it is a directory"],
    ["no owner key to bootstrap with", () => {}, ["--owner-key", "/nonexistent/owner.key", "params", "bootstrap", "/tmp/x.pb"], "no owner key at /nonexistent/owner.key"],
    ["a parameters file in a missing directory", () => {}, ["params", "bootstrap", "/nonexistent/dir/x.pb"], "/nonexistent/dir/x.pb: no such file or directory"],
    ["an endpoint that is not one", () => {}, ["takeownership", "10.0.0.1:99999"], "'10.0.0.1:99999': port must be 1-65535"],
    [
      "an update bundle that is not one",
      () => {},
      ["node", "update", "node-1", "--image", "/tmp"],
      "/tmp is not an update bundle: it has no bundle.json (bun run image writes one to out/image/slot/)",
    ],
    [
      "an update bundle with a file cut short",
      (d) => {
        const bundle = join(d, "bundle");
        mkdirSync(bundle);
        writeFileSync(
          join(bundle, "bundle.json"),
          JSON.stringify({
            format: 1,
            version: "0.2.0",
            arch: "x86_64",
            files: Object.fromEntries(["system", "kernel", "initramfs", "version", "cmdline"].map((n) => [n, { bytes: 10, sha256: "0".repeat(64) }])),
          }),
        );
        for (const name of ["system", "kernel", "initramfs", "version", "cmdline"]) writeFileSync(join(bundle, name), "0123456789");
        writeFileSync(join(bundle, "system"), "01234");
      },
      ["cluster", "update", "--image", "BUNDLE"],
      "the bundle's system is 5 bytes; bundle.json says 10: it is truncated or was changed",
    ],
  ];
  for (const [what, damage, args, cause] of runtime) {
    test(`${what}: exit 1`, async () => {
      const dir = damagedConfig(damage);
      expectOneLineError(await ctlIn(dir, ...args.map((a) => (a === "BUNDLE" ? join(dir, "bundle") : a))), 1, cause);
    });
  }
});
