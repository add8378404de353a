// What a Kubernetes worker asks the curator, through the node's curator
// connection (curator_connection.ts): the kubelet's certificates, the mesh
// key's registration, and the cluster's registry configuration, followed.
// internal/kubernetes names the calls (WorkerCurator); this is where they
// meet the connection.

import { X509Certificate } from "node:crypto";
import type { ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import type { Value } from "../event/mod.ts";
import type { WorkerCurator } from "../kubernetes/mod.ts";
import { RestartRequest, type Runnable } from "../supervisor/mod.ts";
import { withCurator, type CuratorConnection } from "./curator_connection.ts";

/** The deadline of the kubelet's certificate call. */
const ISSUE_TIMEOUT_MS = 10_000;
/** The deadline of the call that reports the mesh key and gets the pod prefix. */
const CLUSTER_NETWORKING_TIMEOUT_MS = 10_000;

export function workerCurator(connection: Value<CuratorConnection>): WorkerCurator {
  return {
    issueKubeletCertificates: async (publicKey, signal) => {
      const current = await connection.get({ signal });
      const response = await withCurator(current, (client) => client.issueKubeletCertificates({ kubeletPublicKey: publicKey }, { timeoutMs: ISSUE_TIMEOUT_MS, signal }));
      return {
        ca: new X509Certificate(response.caCertificate),
        server: new X509Certificate(response.serverCertificate),
        client: new X509Certificate(response.clientCertificate),
        proxy: new X509Certificate(response.proxyClientCertificate),
        dns: new X509Certificate(response.dnsClientCertificate),
        volumes: new X509Certificate(response.volumesClientCertificate),
        // A curator of a version before NetworkPolicy gives none (a rolling update's middle): the kubelet runs without the enforcer.
        ...(response.networkPolicyClientCertificate.length > 0 ? { networkPolicy: new X509Certificate(response.networkPolicyClientCertificate) } : {}),
        apiservers: response.apiservers,
      };
    },
    registerMesh: async (publicKey, signal) => {
      const current = await connection.get({ signal });
      const response = await withCurator(current, (client) => client.updateNodeClusterNetworking({ wireguardPublicKey: publicKey }, { timeoutMs: CLUSTER_NETWORKING_TIMEOUT_MS, signal }));
      return response.podPrefix;
    },
  };
}

/**
 * Follows the cluster's registry configuration (Curator.WatchContainerRegistries)
 * into `registries`; a new set of curators means following through the best one again.
 */
export function registryWatch(connection: Value<CuratorConnection>, registries: Value<readonly ContainerRegistry[]>): Runnable {
  return async (ctx) => {
    const current = await connection.get({ signal: ctx.signal });
    const reconnect = connection
      .waitFor((c) => c !== current, { signal: ctx.signal })
      .then(() => {
        throw new RestartRequest("the curators changed");
      });
    reconnect.catch(() => {});
    const watching = withCurator(current, async (client) => {
      for await (const message of client.watchContainerRegistries({}, { signal: ctx.signal })) {
        registries.set(message.registries);
        ctx.signalHealthy();
      }
    });
    await Promise.race([watching, reconnect]);
    if (!ctx.signal.aborted) throw new Error("the curator ended the registry watch");
  };
}
