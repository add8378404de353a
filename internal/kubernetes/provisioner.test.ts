import { describe, expect, test } from "bun:test";
import type { V1PersistentVolumeClaim } from "@kubernetes/client-node";
import { CSI_DRIVER } from "./csi.ts";
import { awaitsVolumeOn, persistentVolumeFor, quantityBytes, SELECTED_NODE, STORAGE_PROVISIONER, volumeNode } from "./provisioner.ts";

const claim = (fields: { annotations?: Record<string, string>; storageClassName?: string; volumeName?: string; phase?: string; storage?: string } = {}): V1PersistentVolumeClaim => ({
  metadata: { name: "data-db-0", namespace: "apps", uid: "1234-abcd", annotations: fields.annotations ?? { [SELECTED_NODE]: "node-1", [STORAGE_PROVISIONER]: CSI_DRIVER } },
  spec: {
    storageClassName: fields.storageClassName ?? "local",
    accessModes: ["ReadWriteOnce"],
    resources: { requests: { storage: fields.storage ?? "64Mi" } },
    ...(fields.volumeName ? { volumeName: fields.volumeName } : {}),
  },
  status: { phase: fields.phase ?? "Pending" },
});

describe("the provisioner's reading of Kubernetes", () => {
  test("quantities of bytes, rounded up; anything else is none", () => {
    expect(quantityBytes("64Mi")).toBe(64 * 2 ** 20);
    expect(quantityBytes("1Gi")).toBe(2 ** 30);
    expect(quantityBytes("1.5Gi")).toBe(1.5 * 2 ** 30);
    expect(quantityBytes("100M")).toBe(100e6);
    expect(quantityBytes("1e9")).toBe(1e9);
    expect(quantityBytes("123")).toBe(123);
    expect(quantityBytes("0.5")).toBe(1);
    for (const bad of ["", "64MB", "-1Gi", "1m", "Gi", undefined, "9Ei"]) expect(quantityBytes(bad)).toBeUndefined();
  });

  test("a claim waits for this node's volume only when the scheduler chose this node and the class is local", () => {
    expect(awaitsVolumeOn(claim(), "node-1")).toBe(true);
    expect(awaitsVolumeOn(claim(), "node-2")).toBe(false);
    expect(awaitsVolumeOn(claim({ storageClassName: "other" }), "node-1")).toBe(false);
    expect(awaitsVolumeOn(claim({ volumeName: "pvc-x" }), "node-1")).toBe(false);
    expect(awaitsVolumeOn(claim({ phase: "Bound" }), "node-1")).toBe(false);
    expect(awaitsVolumeOn(claim({ annotations: { [SELECTED_NODE]: "node-1" } }), "node-1")).toBe(false);
  });

  test("the PersistentVolume: the claim's name and size, this node only, bound to the claim, deleted with it", () => {
    const pv = persistentVolumeFor(claim(), "node-1", 64 * 2 ** 20);
    expect(pv.metadata?.name).toBe("pvc-1234-abcd");
    expect(pv.spec).toMatchObject({
      capacity: { storage: "64Mi" },
      persistentVolumeReclaimPolicy: "Delete",
      storageClassName: "local",
      csi: { driver: CSI_DRIVER, volumeHandle: "pvc-1234-abcd" },
      claimRef: { namespace: "apps", name: "data-db-0", uid: "1234-abcd" },
    });
    expect(volumeNode(pv)).toBe("node-1");
    expect(volumeNode({ spec: {} })).toBeUndefined();
  });
});
