// The volume plugin on real unix sockets with real bind mounts (root), its
// volumes in a real volume store. The client here stands in for the
// kubelet's CSI client, making the calls the kubelet makes; the qemu e2e
// has the real kubelet call it. The kernel's quotas are a recording
// stand-in (test_quotas.ts).

import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Identity, Node as CsiNode, NodeServiceCapability_RPC_Type, VolumeCapability_AccessMode_Mode, VolumeUsage_Unit } from "../../proto/gen/csi/csi_pb.ts";
import { Registration } from "../../proto/gen/csi/pluginregistration_pb.ts";
import { addService, createClient, createServer, listenLocal, LOCAL_SERVICE, localCredentials, RpcError, Status } from "../rpc/mod.ts";
import { tempDir } from "../testing/mod.ts";
import { CSI_DRIVER, csiIdentityService, csiNodeService, csiRegistrationService, csiSockets } from "./csi.ts";
import { recordingQuotas } from "./test_quotas.ts";
import { VolumeStore } from "./volume_store.ts";

const dir = tempDir("nodecore-csi-");
const kubeletRoot = join(dir.path, "kubelet");
const sockets = csiSockets(kubeletRoot);
/** Every project has 1 MiB and 3 inodes in use. */
const quotas = recordingQuotas({ usedBytes: 1024 * 1024, usedInodes: 3 });
const store = new VolumeStore(join(dir.path, "data", "volumes"), quotas);
const registered: string[] = [];
const server = createServer();
const registrar = createServer();
const MiB = 1024 * 1024;
let node: ReturnType<typeof createClient<typeof CsiNode>>;
const mount = { accessType: { case: "mount" as const, value: {} } };
const rwo = { mode: VolumeCapability_AccessMode_Mode.SINGLE_NODE_WRITER };
const targetOf = (pod: string) => join(sockets.podsDir, pod, "volumes", "kubernetes.io~csi", "pvc-a", "mount");

beforeAll(async () => {
  store.recover();
  store.create("pvc-a", 64 * MiB);
  addService(server, Identity, csiIdentityService(), { ca: LOCAL_SERVICE, policy: { getPluginInfo: "local", getPluginCapabilities: "local", probe: "local" } });
  addService(server, CsiNode, csiNodeService({ store, podsDir: sockets.podsDir, nodeName: "node-1" }), {
    ca: LOCAL_SERVICE,
    policy: { nodePublishVolume: "local", nodeUnpublishVolume: "local", nodeGetVolumeStats: "local", nodeExpandVolume: "local", nodeGetCapabilities: "local", nodeGetInfo: "local" },
  });
  addService(
    registrar,
    Registration,
    csiRegistrationService(sockets.endpoint, (ok, error) => registered.push(`${ok} ${error}`)),
    { ca: LOCAL_SERVICE, policy: { getInfo: "local", notifyRegistrationStatus: "local" } },
  );
  await listenLocal(server, sockets.endpoint);
  await listenLocal(registrar, sockets.registration);
  node = createClient(CsiNode, `unix:${sockets.endpoint}`, { credentials: localCredentials() });
});

afterAll(async () => {
  node?.close();
  for (const pod of ["pod-1", "pod-2"]) await Bun.spawn(["umount", targetOf(pod)], { stderr: "ignore" }).exited;
  server.forceShutdown();
  registrar.forceShutdown();
  dir[Symbol.dispose]();
});

describe("the kubelet finds the plugin", () => {
  test("registration: a CSI plugin of this name at its socket, version 1; the kubelet's answer is heard", async () => {
    const client = createClient(Registration, `unix:${sockets.registration}`, { credentials: localCredentials() });
    try {
      expect(await client.getInfo({})).toMatchObject({ type: "CSIPlugin", name: CSI_DRIVER, endpoint: sockets.endpoint, supportedVersions: ["1.0.0"] });
      await client.notifyRegistrationStatus({ pluginRegistered: true });
      expect(registered).toEqual(["true "]);
    } finally {
      client.close();
    }
  });

  test("identity and capabilities: online expansion, stats, no staging", async () => {
    const identity = createClient(Identity, `unix:${sockets.endpoint}`, { credentials: localCredentials() });
    try {
      expect((await identity.getPluginInfo({})).name).toBe(CSI_DRIVER);
      expect((await identity.probe({})).ready).toBe(true);
    } finally {
      identity.close();
    }
    const caps = (await node.nodeGetCapabilities({})).capabilities.map((c) => (c.type.case === "rpc" ? c.type.value.type : undefined));
    expect(caps).toEqual([NodeServiceCapability_RPC_Type.GET_VOLUME_STATS, NodeServiceCapability_RPC_Type.EXPAND_VOLUME]);
    expect((await node.nodeGetInfo({})).nodeId).toBe("node-1");
  });
});

describe("a pod's volume", () => {
  test("published: the pod's target shows the volume; again is a no-op; unpublished: gone, the data stays", async () => {
    const target = targetOf("pod-1");
    mkdirSync(join(target, ".."), { recursive: true });
    await node.nodePublishVolume({ volumeId: "pvc-a", targetPath: target, volumeCapability: { ...mount, accessMode: rwo } });
    writeFileSync(join(target, "written-by-pod"), "kept");
    expect(readFileSync(join(store.get("pvc-a")!.path, "written-by-pod"), "utf8")).toBe("kept");
    await node.nodePublishVolume({ volumeId: "pvc-a", targetPath: target, volumeCapability: { ...mount, accessMode: rwo } });
    await node.nodeUnpublishVolume({ volumeId: "pvc-a", targetPath: target });
    expect(existsSync(target)).toBe(false);
    await node.nodeUnpublishVolume({ volumeId: "pvc-a", targetPath: target });
    expect(readFileSync(join(store.get("pvc-a")!.path, "written-by-pod"), "utf8")).toBe("kept");
  });

  test("read-only is honoured: the pod reads, and its writes fail", async () => {
    const target = targetOf("pod-2");
    await node.nodePublishVolume({ volumeId: "pvc-a", targetPath: target, readonly: true, volumeCapability: { ...mount, accessMode: rwo } });
    expect(readFileSync(join(target, "written-by-pod"), "utf8")).toBe("kept");
    expect(() => writeFileSync(join(target, "x"), "no")).toThrow(/EROFS|read-only/);
    // The same target asked read-write while mounted read-only: refused, not silently kept.
    const clash = await node.nodePublishVolume({ volumeId: "pvc-a", targetPath: target, volumeCapability: { ...mount, accessMode: rwo } }).catch((e: RpcError) => e);
    expect((clash as RpcError).code).toBe(Status.FAILED_PRECONDITION);
    await node.nodeUnpublishVolume({ volumeId: "pvc-a", targetPath: target });
  });

  test("stats from the quota, and online expansion", async () => {
    const stats = await node.nodeGetVolumeStats({ volumeId: "pvc-a", volumePath: targetOf("pod-1") });
    const bytes = stats.usage.find((u) => u.unit === VolumeUsage_Unit.BYTES)!;
    expect(bytes).toMatchObject({ total: BigInt(64 * MiB), used: BigInt(MiB), available: BigInt(63 * MiB) });
    expect(stats.usage.find((u) => u.unit === VolumeUsage_Unit.INODES)?.used).toBe(3n);
    expect((await node.nodeExpandVolume({ volumeId: "pvc-a", volumePath: targetOf("pod-1"), capacityRange: { requiredBytes: BigInt(128 * MiB) } })).capacityBytes).toBe(BigInt(128 * MiB));
    expect(store.get("pvc-a")!.limitBytes).toBe(128 * MiB);
  });

  test("refused before anything is mounted: other volumes, paths outside the pods, block, many nodes, sizes", async () => {
    const refusal = (p: Promise<unknown>) =>
      p.then(
        () => undefined,
        (e: RpcError) => `${Status[e.code]}: ${e.details}`,
      );
    expect(await refusal(node.nodePublishVolume({ volumeId: "pvc-b", targetPath: targetOf("pod-3"), volumeCapability: { ...mount, accessMode: rwo } }))).toBe(
      "NOT_FOUND: volume pvc-b is not on this node",
    );
    expect(await refusal(node.nodePublishVolume({ volumeId: "../../etc", targetPath: targetOf("pod-3"), volumeCapability: { ...mount, accessMode: rwo } }))).toContain("INVALID_ARGUMENT: volume_id");
    for (const targetPath of ["/etc", `${sockets.podsDir}/../x`, "relative/path", sockets.podsDir]) {
      expect(await refusal(node.nodePublishVolume({ volumeId: "pvc-a", targetPath, volumeCapability: { ...mount, accessMode: rwo } }))).toContain("INVALID_ARGUMENT: target_path");
    }
    expect(await refusal(node.nodePublishVolume({ volumeId: "pvc-a", targetPath: targetOf("pod-3"), volumeCapability: { accessType: { case: "block", value: {} }, accessMode: rwo } }))).toContain(
      "block volumes are not served",
    );
    expect(
      await refusal(
        node.nodePublishVolume({ volumeId: "pvc-a", targetPath: targetOf("pod-3"), volumeCapability: { ...mount, accessMode: { mode: VolumeCapability_AccessMode_Mode.MULTI_NODE_MULTI_WRITER } } }),
      ),
    ).toContain("a volume lives on one node");
    expect(existsSync(targetOf("pod-3"))).toBe(false);
    expect(await refusal(node.nodeExpandVolume({ volumeId: "pvc-a", capacityRange: { requiredBytes: BigInt(Number.MAX_SAFE_INTEGER) } }))).toContain("RESOURCE_EXHAUSTED");
  });
});
