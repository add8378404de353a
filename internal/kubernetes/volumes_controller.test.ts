import { describe, expect, test } from "bun:test";
import type { V1CSIStorageCapacity, V1PersistentVolumeClaim } from "@kubernetes/client-node";
import { CAPACITY_PREFIX, persistentVolumeFor } from "./provisioner.ts";
import { capacityNode, GoneNodes, volumesDecision, type VolumesInput } from "./volumes_controller.ts";

const MiB = 2 ** 20;

const claim = (uid: string, storage: string, fields: { volumeName?: string; phase?: string; storageClassName?: string; deleting?: boolean } = {}): V1PersistentVolumeClaim => ({
  metadata: { name: `data-${uid}`, namespace: "apps", uid, ...(fields.deleting ? { deletionTimestamp: new Date() } : {}) },
  spec: { storageClassName: fields.storageClassName ?? "local", resources: { requests: { storage } }, ...(fields.volumeName ? { volumeName: fields.volumeName } : {}) },
  status: { phase: fields.phase ?? "Pending" },
});

const capacity = (node: string, bytes: number, name = `${CAPACITY_PREFIX}${node}`): V1CSIStorageCapacity => ({
  metadata: { name, namespace: "kube-system" },
  storageClassName: "local",
  nodeTopology: { matchLabels: { "kubernetes.io/hostname": node } },
  capacity: String(bytes),
  maximumVolumeSize: String(bytes),
});

const input = (fields: Partial<VolumesInput>): VolumesInput => ({ volumes: [], claims: [], capacities: [], gone: new Set(), workers: new Set(), ...fields });

describe("the volumes controller's decisions", () => {
  test("a volume on a node that is gone is orphaned, with its claim; one on a node that is only not a worker now is kept", () => {
    const bound = claim("a", "64Mi", { volumeName: "pvc-a", phase: "Bound" });
    const onGone = persistentVolumeFor(bound, "node-gone", 64 * MiB);
    const unclaimed = persistentVolumeFor(claim("b", "64Mi"), "node-gone", 64 * MiB);
    const onResting = persistentVolumeFor(claim("c", "64Mi"), "node-resting", 64 * MiB);
    const foreign = { ...persistentVolumeFor(claim("d", "64Mi"), "node-gone", 64 * MiB), spec: { ...onGone.spec, csi: { driver: "other.example", volumeHandle: "x" } } };
    const decision = volumesDecision(input({ volumes: [onGone, unclaimed, onResting, foreign], claims: [bound], gone: new Set(["node-gone"]), workers: new Set(["node-w"]) }));
    expect(decision.orphaned.map((o) => [o.volume.metadata!.name, o.node, o.claim?.metadata?.uid])).toEqual([
      ["pvc-a", "node-gone", "a"],
      // Its claim no longer exists: the PV goes, nothing is told.
      ["pvc-b", "node-gone", undefined],
    ]);
  });

  test("the room a node that is not a worker published is stale; others' and foreign objects are left", () => {
    const decision = volumesDecision(
      input({
        capacities: [capacity("node-w", 100 * MiB), capacity("node-resting", 100 * MiB), { ...capacity("node-x", 1), storageClassName: "other" }, capacity("node-y", 1, "someone-elses")],
        workers: new Set(["node-w"]),
      }),
    );
    expect(decision.staleCapacities).toEqual([`${CAPACITY_PREFIX}node-resting`]);
    expect(capacityNode(capacity("node-y", 1, "someone-elses"))).toBeUndefined();
  });

  test("a pending claim larger than every worker can give is named with each worker's room; judged only once every worker said", () => {
    const claims = [
      claim("big", "1Gi"),
      claim("fits", "100Mi"),
      claim("bound", "1Gi", { volumeName: "pvc-bound", phase: "Bound" }),
      claim("other", "1Gi", { storageClassName: "fast" }),
      claim("leaving", "1Gi", { deleting: true }),
    ];
    const both = volumesDecision(input({ claims, capacities: [capacity("node-a", 100 * MiB), capacity("node-b", 300 * MiB)], workers: new Set(["node-a", "node-b"]) }));
    expect(both.tooLarge.map((t) => t.claim.metadata!.uid)).toEqual(["big"]);
    expect(both.tooLarge[0]!.message).toBe(
      "no worker has room for 1.0 GiB; what each can give new volumes, its own reserve kept: node-b 300 MiB, node-a 100 MiB. Ask for less, free room on a worker, or add one",
    );
    // node-c has not published its room yet: it may have enough.
    const unsure = volumesDecision(input({ claims, capacities: [capacity("node-a", 100 * MiB)], workers: new Set(["node-a", "node-c"]) }));
    expect(unsure.tooLarge).toEqual([]);
    expect(volumesDecision(input({ claims })).tooLarge).toEqual([]);
  });

  test("a rooms list is bounded", () => {
    const workers = Array.from({ length: 20 }, (_, i) => `node-${String(i).padStart(2, "0")}`);
    const decision = volumesDecision(input({ claims: [claim("big", "1Gi")], capacities: workers.map((w, i) => capacity(w, (i + 1) * MiB)), workers: new Set(workers) }));
    expect(decision.tooLarge[0]!.message).toContain("node-19 20 MiB");
    expect(decision.tooLarge[0]!.message).toContain("and 12 more with less");
    expect(decision.tooLarge[0]!.message).not.toContain("node-00");
  });

  test("a node is gone only when two looks in a row miss it", () => {
    const looks = new GoneNodes();
    expect(looks.look(new Set(["node-a"]), ["node-a", "node-b"])).toEqual(new Set());
    expect(looks.look(new Set(["node-a"]), ["node-a", "node-b"])).toEqual(new Set(["node-b"]));
    // Back in the records (a reading that missed it): not gone, and the count starts over.
    expect(looks.look(new Set(["node-a", "node-b"]), ["node-b"])).toEqual(new Set());
    expect(looks.look(new Set(["node-a"]), ["node-b"])).toEqual(new Set());
  });
});
