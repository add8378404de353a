// What the curator hands out for Kubernetes: kubelet certificates to
// worker nodes, a client certificate to the owner, and where the apiservers
// are. The Kubernetes PKI itself lives in etcd (internal/kubernetes); the
// curator reads it, or creates it if no controller has yet.

import type { Etcd3 } from "etcd3";
import { NodeState } from "../../proto/gen/common/common_pb.ts";
import { APISERVER_PORT, ensureKubernetesPKI, kubernetesKeys, type KubernetesPKI } from "../kubernetes/mod.ts";
import { formatAddress } from "./client/mod.ts";
import type { CuratorStore } from "./store.ts";

/** The PKI, read once per curator (it never changes once created). */
export function kubernetesPKISource(etcd: Etcd3): () => Promise<KubernetesPKI> {
  let loaded: Promise<KubernetesPKI> | undefined;
  return () => {
    loaded ??= ensureKubernetesPKI(kubernetesKeys(etcd)).then((r) => r.pki);
    // A failed read is not remembered: the next call tries again.
    loaded.catch(() => (loaded = undefined));
    return loaded;
  };
}

/**
 * https://<address>:6443 of every UP node that holds both the
 * kubernetes-controller and the consensus role (a controller runs only
 * beside consensus), from the cluster's records, sorted.
 */
export async function apiserverUrls(store: CuratorStore): Promise<string[]> {
  const { nodes } = await store.nodes();
  return nodes
    .filter((n) => n.state === NodeState.UP && n.roles?.kubernetesController && n.roles.consensusMember && n.status?.externalAddress)
    .map((n) => `https://${formatAddress({ host: n.status!.externalAddress, port: APISERVER_PORT })}`)
    .sort();
}
