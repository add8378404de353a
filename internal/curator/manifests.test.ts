// The owner's add-on manifests against a real one-node cluster on loopback:
// stored, replaced, listed without what they hold, read back by the
// controllers' reader, deleted; bad input refused in one line, nothing
// changed; only the owner may; a Secret among the objects reaches no
// listing, audit line or log.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { X509Certificate } from "node:crypto";
import { Management } from "../../proto/gen/api/management_pb.ts";
import type { KeyPair } from "../pki/mod.ts";
import { Status } from "../rpc/mod.ts";
import { eventually } from "../testing/mod.ts";
import { MAX_MANIFESTS } from "../kubernetes/manifests.ts";
import { readEvents } from "./audit.ts";
import { curatorReader } from "./reader.ts";
import { enrolNode, ownerOf, refusal, startTestCluster, type TestCluster } from "./test_cluster.ts";

let cluster: TestCluster;
let owner: { kind: "owner"; certificate: X509Certificate; privateKey: KeyPair["privateKey"] };
let node: Awaited<ReturnType<typeof enrolNode>>;

const SECRET_VALUE = "c2VjcmV0LXZhbHVlLVF3OQ==";
const objects = (extra: unknown[] = []) =>
  JSON.stringify([
    { apiVersion: "v1", kind: "Namespace", metadata: { name: "web" } },
    { apiVersion: "v1", kind: "Secret", metadata: { name: "db", namespace: "web" }, data: { password: SECRET_VALUE } },
    ...extra,
  ]);

beforeAll(async () => {
  cluster = await startTestCluster();
  owner = await ownerOf(cluster);
  node = await enrolNode(cluster, owner);
}, 120_000);

afterAll(async () => {
  await cluster?.close();
}, 30_000);

describe("the owner's add-on manifests", () => {
  test("stored, replaced and listed by what they name, never what they hold; the controllers' reader has them; deleted", async () => {
    const management = cluster.client(Management, owner);
    try {
      const first = await management.applyManifest({ manifest: { name: "web", objectsJson: objects() } });
      expect(first.sha256).toMatch(/^[0-9a-f]{64}$/);
      await management.applyManifest({
        manifest: { name: "another", objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c", namespace: "default" }, data: { a: "b" } }]) },
      });
      const replaced = await management.applyManifest({
        manifest: { name: "web", objectsJson: objects([{ apiVersion: "apps/v1", kind: "Deployment", metadata: { name: "site", namespace: "web" }, spec: {} }]) },
      });
      expect(replaced.sha256).not.toBe(first.sha256);
      const listed = (await management.listManifests({})).manifests;
      expect(listed.map((m) => m.name)).toEqual(["another", "web"]);
      expect(listed[1]).toMatchObject({ name: "web", objects: ["Namespace web", "Secret web/db", "Deployment web/site"], sha256: replaced.sha256 });
      expect(listed[1]!.updatedMs).toBeGreaterThan(0n);
      expect(JSON.stringify(listed, (_k, v: unknown) => (typeof v === "bigint" ? String(v) : v))).not.toContain(SECRET_VALUE);
      // What a controller applies: read from the member, as the reconciler reads it.
      const stored = await curatorReader(cluster.etcd).manifests();
      expect(stored.map((m) => m.name)).toEqual(["another", "web"]);
      expect(JSON.parse(stored[1]!.objectsJson)).toHaveLength(3);
      await management.deleteManifest({ name: "another" });
      expect((await management.listManifests({})).manifests.map((m) => m.name)).toEqual(["web"]);
      const missing = await refusal(management.deleteManifest({ name: "another" }));
      expect(missing.code).toBe(Status.NOT_FOUND);
      expect(missing.details).toBe("no manifest named another (ctl cluster manifests list names them)");
    } finally {
      management.close();
    }
  }, 30_000);

  test("bad input is refused in one line naming its cause, and what is stored stays", async () => {
    const management = cluster.client(Management, owner);
    try {
      const before = await management.listManifests({});
      const cases: [unknown, RegExp][] = [
        [{ name: "Web!", objectsJson: objects() }, /^name: "Web!" is not a manifest name/],
        [{ name: "web", objectsJson: "{not json" }, /^manifest web: its objects are not JSON/],
        [{ name: "web", objectsJson: "[]" }, /^manifest web: it holds no object$/],
        [{ name: "web", objectsJson: JSON.stringify([{ kind: "Pod", metadata: { name: "p" } }]) }, /^manifest web: object 1: apiVersion "undefined" is not group\/version or version$/],
        [{ name: "web", objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "Pod", metadata: { generateName: "p-" } }]) }, /^manifest web: object 1 \(Pod\) has metadata\.generateName/],
        [{ name: "web", objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "List", metadata: { name: "l" }, items: [] }]) }, /^manifest web: object 1: a List is not applied as one object/],
        [
          {
            name: "web",
            objectsJson: JSON.stringify([
              { apiVersion: "v1", kind: "Pod", metadata: { name: "p" } },
              { apiVersion: "v1", kind: "Pod", metadata: { name: "p" } },
            ]),
          },
          /^manifest web: object 2 \(Pod p\) is named twice$/,
        ],
        [
          { name: "web", objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "big" }, data: { a: "x".repeat(300_000) } }]) },
          /^manifest web: it is \d+ bytes of JSON, more than the 262144 a manifest may be; split it$/,
        ],
      ];
      for (const [manifest, why] of cases) {
        const error = await refusal(management.applyManifest({ manifest: manifest as { name: string; objectsJson: string } }));
        expect(error.code).toBe(Status.INVALID_ARGUMENT);
        expect(error.details).toMatch(why);
        expect(error.details).not.toContain("\n");
      }
      expect((await refusal(management.applyManifest({}))).details).toBe("manifest is missing");
      expect(await management.listManifests({})).toEqual(before);
    } finally {
      management.close();
    }
  }, 30_000);

  test("only so many are kept, and the one past the bound is refused, saying so", async () => {
    const management = cluster.client(Management, owner);
    try {
      const have = (await management.listManifests({})).manifests.length;
      for (let i = have; i < MAX_MANIFESTS; i++)
        await management.applyManifest({ manifest: { name: `m${i}`, objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: `c${i}` } }]) } });
      const error = await refusal(management.applyManifest({ manifest: { name: "one-more", objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" } }]) } }));
      expect(error.code).toBe(Status.RESOURCE_EXHAUSTED);
      expect(error.details).toBe(`the cluster has ${MAX_MANIFESTS} manifests, the most it keeps; delete one first`);
      // Replacing one that is there is no new one.
      await management.applyManifest({ manifest: { name: "m1", objectsJson: JSON.stringify([{ apiVersion: "v1", kind: "ConfigMap", metadata: { name: "c1b" } }]) } });
      for (let i = have; i < MAX_MANIFESTS; i++) await management.deleteManifest({ name: `m${i}` });
    } finally {
      management.close();
    }
  }, 60_000);

  test("nodes may not store, list or delete them; the audit trail names each write and holds no object's contents", async () => {
    const management = cluster.client(Management, node);
    expect((await refusal(management.applyManifest({ manifest: { name: "evil", objectsJson: objects() } }))).code).toBe(Status.PERMISSION_DENIED);
    expect((await refusal(management.listManifests({}))).code).toBe(Status.PERMISSION_DENIED);
    expect((await refusal(management.deleteManifest({ name: "web" }))).code).toBe(Status.PERMISSION_DENIED);
    management.close();
    await eventually(
      async () => {
        const events = (await readEvents(cluster.store.etcd, { last: 1_000 })).events.filter((e) => e.method.includes("Manifest"));
        expect(events.some((e) => e.method === "Management/ApplyManifest" && e.result === "OK" && e.detail.includes('name: "web"') && e.detail.includes("objectsJson: <redacted>"))).toBe(true);
        expect(events.some((e) => e.method === "Management/DeleteManifest" && e.result === "OK")).toBe(true);
      },
      { timeoutMs: 15_000, what: "the manifest calls in the audit trail" },
    );
    const text = (value: unknown) => JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? String(v) : v));
    expect(text((await readEvents(cluster.store.etcd, { last: 10_000 })).events)).not.toContain(SECRET_VALUE);
    expect(text(cluster.logs)).not.toContain(SECRET_VALUE);
  }, 30_000);
});
