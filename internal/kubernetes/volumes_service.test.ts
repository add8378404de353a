// The volume plugin as the role server launches it: the store recovered,
// both sockets made for the kubelet, the status line said; stopped, it
// lets go of them. The kernel's quotas are a recording stand-in
// (test_quotas.ts).

import { expect, test } from "bun:test";
import { existsSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { Identity } from "../../proto/gen/csi/csi_pb.ts";
import { Registration } from "../../proto/gen/csi/pluginregistration_pb.ts";
import { captureLogger } from "../log/mod.ts";
import { createClient, localCredentials } from "../rpc/mod.ts";
import { supervise } from "../supervisor/mod.ts";
import { eventually, tempDir } from "../testing/mod.ts";
import { CSI_DRIVER, csiSockets } from "./csi.ts";
import { volumesService } from "./volumes_service.ts";
import { recordingQuotas } from "./test_quotas.ts";
import { VolumeStore } from "./volume_store.ts";

test("the plugin finishes an interrupted make, serves both sockets, says its room; stopped, it is gone", async () => {
  using dir = tempDir();
  const quotas = recordingQuotas();
  const store = new VolumeStore(join(dir.path, "volumes"), quotas);
  mkdirSync(join(store.root, ".new-pvc-half"), { recursive: true });
  const kubeletRoot = join(dir.path, "kubelet");
  const lines: string[] = [];
  const { logger } = captureLogger("root");
  const supervisor = supervise(volumesService({ store, kubeletRoot, nodeName: "node-1", report: (component, state, message) => lines.push(`${component} ${state} ${message}`) }), { logger });
  try {
    const sockets = csiSockets(kubeletRoot);
    await eventually(() => expect(lines.at(-1)).toStartWith("volumes running 0 volumes;"), { timeoutMs: 10_000, what: "the volumes line running" });
    expect(existsSync(join(store.root, ".new-pvc-half"))).toBe(false);
    const registration = createClient(Registration, `unix:${sockets.registration}`, { credentials: localCredentials() });
    const identity = createClient(Identity, `unix:${sockets.endpoint}`, { credentials: localCredentials() });
    try {
      expect((await registration.getInfo({})).endpoint).toBe(sockets.endpoint);
      expect((await identity.getPluginInfo({})).name).toBe(CSI_DRIVER);
    } finally {
      registration.close();
      identity.close();
    }
  } finally {
    await supervisor.stop();
  }
  const after = createClient(Identity, `unix:${csiSockets(kubeletRoot).endpoint}`, { credentials: localCredentials() });
  try {
    expect(
      await after.probe({}, { timeoutMs: 2000 }).then(
        () => "answered",
        () => "gone",
      ),
    ).toBe("gone");
  } finally {
    after.close();
  }
});
