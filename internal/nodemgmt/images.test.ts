// NodeManagement's image calls over real mutual TLS on loopback: the
// bundle's bytes land on disk, are checked whole, and only a good bundle
// reaches the image store (a stand-in that records what it was given);
// whatever happens, the received file is gone afterwards.

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { ImportPhase } from "../../proto/gen/api/node_management_pb.ts";
import type { ClusterMembership } from "../cluster/mod.ts";
import type { ImageStore } from "../containerd/mod.ts";
import { Value } from "../event/mod.ts";
import { captureLogger } from "../log/mod.ts";
import { LogTree } from "../logtree/mod.ts";
import { Status } from "../rpc/mod.ts";
import { refusal } from "../curator/test_cluster.ts";
import { supervise, type Supervisor } from "../supervisor/mod.ts";
import { eventually, freePort, tempDir, testCA, testMembership, testNode, testOwner } from "../testing/mod.ts";
import { helloImage } from "../../image/oci.ts";
import { dialNodeManagement } from "./client/mod.ts";
import { nodeManagementRunnable } from "./mod.ts";

const ca = testCA();
const thisNode = testNode(ca);
const owner = testOwner(ca).tls;
const port = await freePort();
const dir = tempDir("nodecore-images-");
const scratchDir = join(dir.path, "containerd-imports");
const imported: string[] = [];
let running = true;
const store: ImageStore = {
  scratchDir,
  async importBundle(file) {
    imported.push(file);
    return ["registry.example.com/apps/hello:1"];
  },
  async list() {
    return [{ name: "registry.example.com/apps/hello:1", digest: `sha256:${"a".repeat(64)}`, size: "1.9 MiB" }];
  },
};
let supervisor: Supervisor;
const bundle = helloImage(new Uint8Array(3 * 1024 * 1024).fill(7), "registry.example.com/apps/hello:1");

beforeAll(async () => {
  const membership = new Value<ClusterMembership>();
  membership.set(testMembership(thisNode));
  const { logger } = captureLogger("root");
  supervisor = supervise(nodeManagementRunnable({ membership, port, logs: new LogTree(), services: () => [], power: () => {}, images: () => (running ? store : undefined) }), { logger });
  await eventually(() => expect(supervisor.dump()[0]!.state).toBe("healthy"));
});

afterAll(async () => {
  await supervisor.stop();
  dir[Symbol.dispose]();
});

const client = () => dialNodeManagement(thisNode.id, "127.0.0.1", owner, port);

async function* requests(bytes: Uint8Array, sizeBytes = bytes.length, chunk = 256 * 1024) {
  yield { sizeBytes: BigInt(sizeBytes), fileName: "hello.oci.tar" };
  for (let at = 0; at < bytes.length; at += chunk) yield { data: bytes.subarray(at, at + chunk) };
}

async function importing(bytes: Uint8Array, sizeBytes?: number): Promise<{ phases: ImportPhase[]; images: string[] }> {
  const c = client();
  try {
    const phases: ImportPhase[] = [];
    let images: string[] = [];
    for await (const answer of c.importImages(requests(bytes, sizeBytes))) {
      if (phases.at(-1) !== answer.phase) phases.push(answer.phase);
      images = answer.images;
    }
    return { phases, images };
  } finally {
    c.close();
  }
}

describe("ImportImages", () => {
  test("a good bundle: received, checked, imported, and the received file removed", async () => {
    const before = imported.length;
    expect(await importing(bundle)).toEqual({ phases: [ImportPhase.RECEIVING, ImportPhase.CHECKING, ImportPhase.IMPORTING, ImportPhase.IMPORTED], images: ["registry.example.com/apps/hello:1"] });
    expect(imported.length).toBe(before + 1);
    expect(readdirSync(scratchDir)).toEqual([]);
  });

  test("a truncated bundle, one that is no image, and one longer than it said: refused, nothing imported, nothing left", async () => {
    const before = imported.length;
    const cut = bundle.subarray(0, bundle.length - 4096);
    const truncated = await refusal(importing(cut));
    expect(truncated.code).toBe(Status.INVALID_ARGUMENT);
    expect(truncated.details).toMatch(/^'hello\.oci\.tar': the tar is cut short.*; nothing was imported$/);
    const short = await refusal(importing(cut, bundle.length));
    expect(short.details).toBe(`'hello.oci.tar': the import ended after ${cut.length} of its ${bundle.length} bytes`);
    const long = await refusal(importing(bundle, bundle.length - 1));
    expect(long.details).toBe(`'hello.oci.tar': more bytes than the ${bundle.length - 1} the first request said`);
    const noImage = await refusal(importing(new Uint8Array(10_240).fill(65)));
    expect(noImage.details).toBe("'hello.oci.tar': not a tar file (an OCI image layout or docker save tar); nothing was imported");
    expect(imported.length).toBe(before);
    expect(existsSync(scratchDir) ? readdirSync(scratchDir) : []).toEqual([]);
  });

  test("a bundle that does not fit the data partition is refused before a byte is taken, naming the free space", async () => {
    const error = await refusal(importing(new Uint8Array(), 60 * 1024 ** 3));
    expect(error.code).toBe(Status.FAILED_PRECONDITION);
    expect(error.details).toMatch(/^'hello\.oci\.tar' \(60 GiB\) does not fit this node: an import needs about 180(\.\d)? GiB free on the data partition, which has [\d.]+ [KMGT]?i?B$/);
  });

  test("a node without the image store (no worker role) says so", async () => {
    running = false;
    try {
      const error = await refusal(importing(bundle));
      expect(error.code).toBe(Status.FAILED_PRECONDITION);
      expect(error.details).toContain("it holds no kubernetes-worker role");
      const c = client();
      expect((await refusal(c.listImages({}))).code).toBe(Status.FAILED_PRECONDITION);
      c.close();
    } finally {
      running = true;
    }
  });

  test("ListImages: the store's named images", async () => {
    const c = client();
    const listed = await c.listImages({});
    c.close();
    expect(listed.images.map((i) => [i.name, i.size])).toEqual([["registry.example.com/apps/hello:1", "1.9 MiB"]]);
  });
});
