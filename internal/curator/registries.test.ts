// The cluster's registry configuration against a real one-node cluster on
// loopback: the owner sets it, a worker follows it with its credentials,
// and nobody else learns a password: not a node without the worker role,
// not the listing, the audit trail or the curator's log.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { Management } from "../../proto/gen/api/management_pb.ts";
import { Curator, type ContainerRegistries } from "../../proto/gen/curator/curator_pb.ts";
import { toPem, type KeyPair } from "../pki/mod.ts";
import { Status } from "../rpc/mod.ts";
import { eventually, testCA } from "../testing/mod.ts";
import { readEvents } from "./audit.ts";
import { enrolNode, ownerOf, refusal, startTestCluster, type TestCluster } from "./test_cluster.ts";

let cluster: TestCluster;
let owner: { kind: "owner"; certificate: X509Certificate; privateKey: KeyPair["privateKey"] };
/** A node holding the kubernetes-worker role, and one holding no role. */
let worker: Awaited<ReturnType<typeof enrolNode>>;
let bystander: Awaited<ReturnType<typeof enrolNode>>;

const PASSWORD = "pw-Zq8-registry";
const NEW_PASSWORD = "pw-Kx3-rotated";
const caPem = toPem(testCA().certificate);

beforeAll(async () => {
  cluster = await startTestCluster();
  owner = await ownerOf(cluster);
  worker = await enrolNode(cluster, owner);
  bystander = await enrolNode(cluster, owner);
  const management = cluster.client(Management, owner);
  await management.updateNodeRoles({ id: worker.id, kubernetesWorker: true });
  management.close();
}, 120_000);

afterAll(async () => {
  await cluster?.close();
}, 30_000);

/** Reads a stream one message at a time. */
function reader(stream: AsyncIterable<ContainerRegistries>) {
  const iterator = stream[Symbol.asyncIterator]();
  return async () => {
    const next = await iterator.next();
    if (next.done) throw new Error("the stream ended");
    return next.value;
  };
}

describe("the owner's registry configuration", () => {
  test("set and listed without the password; bad input refused in one line naming its cause, and nothing changed", async () => {
    const management = cluster.client(Management, owner);
    try {
      await management.setContainerRegistry({
        registry: { host: "registry.example.com:5000", mirrors: ["https://mirror.example.com"], caPem, credentials: { username: "alice", password: PASSWORD } },
      });
      const listed = await management.listContainerRegistries({});
      expect(listed.registries).toHaveLength(1);
      const shown = listed.registries[0]!;
      expect(shown).toMatchObject({ host: "registry.example.com:5000", mirrors: ["https://mirror.example.com"], username: "alice", hasCredentials: true, skipVerify: false, upstreamDisabled: false });
      expect(shown.ca).toMatch(/sha256:[0-9a-f]{64}$/);
      expect(JSON.stringify(listed)).not.toContain(PASSWORD);

      const bad: [Record<string, unknown>, string][] = [
        [{ host: "registry.example.com:5000", mirrors: ["ftp://m.example.com"] }, "registry.mirrors[0]: 'ftp://m.example.com': the scheme is 'ftp'; use https or http"],
        [{ host: "registry.example.com:5000", caPem: "hello" }, "registry.ca_pem: holds no PEM certificate (-----BEGIN CERTIFICATE-----)"],
        [{ host: "https://registry.example.com" }, "registry.host: 'https://registry.example.com' is not a registry host (a host, not a URL: registry.example.com or 10.0.0.5:5000)"],
        [{ host: "registry.example.com:5000", upstreamDisabled: true }, "registry.upstream_disabled: with the host itself off, name at least one mirror"],
      ];
      for (const [registry, message] of bad) {
        const error = await refusal(management.setContainerRegistry({ registry }));
        expect(error.code).toBe(Status.INVALID_ARGUMENT);
        expect(error.details).toBe(message);
      }
      const missing = await refusal(management.setContainerRegistryCredentials({ host: "other.example.com", credentials: { username: "u", password: "p" } }));
      expect(missing.code).toBe(Status.NOT_FOUND);
      expect(missing.details).toBe("no registry entry for other.example.com; set one first (ctl cluster registry set other.example.com)");
      expect((await refusal(management.removeContainerRegistry({ host: "other.example.com" }))).code).toBe(Status.NOT_FOUND);
      expect(await management.listContainerRegistries({})).toEqual(listed);
    } finally {
      management.close();
    }
  }, 30_000);

  test("nodes may not set or list it, and a node without the worker role may not follow it", async () => {
    for (const node of [worker, bystander]) {
      const management = cluster.client(Management, node);
      expect((await refusal(management.setContainerRegistry({ registry: { host: "evil.example.com" } }))).code).toBe(Status.PERMISSION_DENIED);
      expect((await refusal(management.listContainerRegistries({}))).code).toBe(Status.PERMISSION_DENIED);
      management.close();
    }
    const curator = cluster.client(Curator, bystander);
    const error = await refusal(reader(curator.watchContainerRegistries({}))());
    expect(error.code).toBe(Status.PERMISSION_DENIED);
    expect(error.details).toBe(`node ${bystander.id} does not hold the kubernetes-worker role; only workers pull images`);
    curator.close();
    const ownerCurator = cluster.client(Curator, owner);
    expect((await refusal(reader(ownerCurator.watchContainerRegistries({}))())).code).toBe(Status.PERMISSION_DENIED);
    ownerCurator.close();
  }, 30_000);

  test("a worker follows it, credentials included, and sees each change on the same stream; losing the role ends the stream", async () => {
    const curator = cluster.client(Curator, worker);
    const management = cluster.client(Management, owner);
    const controller = new AbortController();
    try {
      const next = reader(curator.watchContainerRegistries({}, { signal: controller.signal }));
      const first = await next();
      expect(first.registries.map((r) => [r.host, r.credentials?.username, r.credentials?.password])).toEqual([["registry.example.com:5000", "alice", PASSWORD]]);

      await management.setContainerRegistryCredentials({ host: "registry.example.com:5000", credentials: { username: "alice", password: NEW_PASSWORD } });
      expect((await next()).registries[0]?.credentials?.password).toBe(NEW_PASSWORD);

      await management.setContainerRegistry({ registry: { host: "docker.io", mirrors: ["https://mirror.example.com"] } });
      expect((await next()).registries.map((r) => r.host)).toEqual(["docker.io", "registry.example.com:5000"]);

      await management.setContainerRegistryCredentials({ host: "registry.example.com:5000" });
      expect((await next()).registries.find((r) => r.host === "registry.example.com:5000")?.credentials).toBeUndefined();

      await management.removeContainerRegistry({ host: "docker.io" });
      expect((await next()).registries.map((r) => r.host)).toEqual(["registry.example.com:5000"]);

      // Rights end when they are revoked, open streams included.
      const pending = next();
      await management.updateNodeRoles({ id: worker.id, kubernetesWorker: false });
      const ended = await refusal(pending);
      expect(ended.code).toBe(Status.PERMISSION_DENIED);
      expect(ended.details).toBe(`node ${worker.id} no longer holds the kubernetes-worker role`);
    } finally {
      controller.abort();
      await management.updateNodeRoles({ id: worker.id, kubernetesWorker: true });
      curator.close();
      management.close();
    }
  }, 60_000);

  test("the audit trail records every write, and neither it nor the curator's log holds a password", async () => {
    await eventually(
      async () => {
        const events = (await readEvents(cluster.store.etcd, { last: 1_000 })).events.filter((e) => e.method.includes("ContainerRegistr"));
        expect(events.filter((e) => e.method === "Management/SetContainerRegistry").length).toBeGreaterThanOrEqual(2);
        expect(events.some((e) => e.method === "Management/SetContainerRegistryCredentials" && e.detail.includes("credentials: <redacted>"))).toBe(true);
        expect(events.some((e) => e.method === "Management/RemoveContainerRegistry" && e.result === "OK")).toBe(true);
      },
      { timeoutMs: 15_000, what: "the registry calls in the audit trail" },
    );
    const text = (value: unknown) => JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? String(v) : v));
    const all = text((await readEvents(cluster.store.etcd, { last: 10_000 })).events);
    expect(all).toContain("registry.example.com:5000");
    for (const secret of [PASSWORD, NEW_PASSWORD]) {
      expect(all).not.toContain(secret);
      expect(text(cluster.logs)).not.toContain(secret);
    }
  }, 30_000);

  test("a configuration too large for one etcd write is refused, saying so, and what is stored stays", async () => {
    const management = cluster.client(Management, owner);
    try {
      const bundle = Array.from({ length: 16 }, () => toPem(testCA().certificate)).join("");
      const before = await management.listContainerRegistries({});
      let refused: Awaited<ReturnType<typeof refusal>> | undefined;
      for (let i = 0; i < 64 && !refused; i++) {
        await management
          .setContainerRegistry({
            registry: {
              host: `big-${i}.example.com`,
              caPem: bundle,
              mirrors: Array.from({ length: 8 }, (_, m) => `https://m${m}.example.com/${"p".repeat(400)}`),
              credentials: { username: "u", password: "x".repeat(8000) },
            },
          })
          .catch(async (err: unknown) => {
            refused = await refusal(Promise.reject(err));
          });
      }
      expect(refused?.code).toBe(Status.RESOURCE_EXHAUSTED);
      expect(refused?.details).toMatch(/^the registry configuration would be \d+ bytes, more than the 1048576 one etcd write takes; use smaller CA bundles or fewer entries$/);
      const after = await management.listContainerRegistries({});
      expect(after.registries.length).toBeGreaterThan(before.registries.length);
      for (const entry of after.registries.filter((r) => r.host.startsWith("big-"))) await management.removeContainerRegistry({ host: entry.host });
    } finally {
      management.close();
    }
  }, 120_000);
});
