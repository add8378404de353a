// The controller-manager's service accounts, made before it asks for them.
//
// The controller-manager runs each of its ~40 controllers under its own
// service account in kube-system (--use-service-account-credentials, so
// that each has only its own rights). It builds the controllers one after
// another, and for each it reads the account, reads the namespace, and
// creates the account when it is missing: three round trips, one a write,
// in sequence, on the apiserver's busiest minute. Measured on a launched
// 3-VM cluster under TCG (2026-12-04): the accounts' creation times spread
// over 103 s after the controller-manager took its lease, 1 to 12 s each,
// and no controller ran before the last one, the service-account
// controller (every namespace's `default` account, which pods need)
// included.
//
// So the reconciler creates them all beside its first pass (nothing waits
// for them), a few requests at a time, while the controller-manager is
// still loading. It then finds
// each one at its first read. Which accounts: the subjects in kube-system
// of the apiserver's own bootstrap bindings `system:controller:<name>`
// (kubernetes.io/bootstrapping=rbac-defaults), which name exactly the
// accounts its controllers run as, for this Kubernetes version, with no
// list of ours to keep. The few among them that run nowhere here (the
// cloud provider's route and service controllers, a controller off by
// default) get an account too: an empty account with no token and only the
// rights upstream's policy already binds to it.
//
// The objects are what the controller-manager would create itself (a name
// in kube-system, nothing else), so it takes them as its own. A creation
// that races another controller's, or the controller-manager's, is fine.

import type { V1ClusterRoleBinding } from "@kubernetes/client-node";
import { clientConfiguration, statusOf } from "./api_client.ts";
import type { KubernetesPKI } from "./pki.ts";

export const CONTROLLER_ACCOUNTS_NAMESPACE = "kube-system";
/** The apiserver's label on the RBAC objects it makes at its start. */
const BOOTSTRAP_SELECTOR = "kubernetes.io/bootstrapping=rbac-defaults";
const CONTROLLER_BINDING_PREFIX = "system:controller:";
/** Creations in flight at once: enough to overlap the round trips, not so many that they crowd the apiserver. */
const CONCURRENCY = 6;
/** More than any release's controllers (~45); a longer list is cut here, not trusted. */
const MAX_ACCOUNTS = 128;

/** The controller accounts the bootstrap bindings name: sorted, each once, at most MAX_ACCOUNTS. */
export function controllerAccountNames(bindings: readonly Pick<V1ClusterRoleBinding, "metadata" | "subjects">[]): string[] {
  const names = new Set<string>();
  for (const binding of bindings) {
    if (!binding.metadata?.name?.startsWith(CONTROLLER_BINDING_PREFIX)) continue;
    for (const subject of binding.subjects ?? []) {
      if (subject.kind === "ServiceAccount" && subject.namespace === CONTROLLER_ACCOUNTS_NAMESPACE && /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/.test(subject.name)) names.add(subject.name);
    }
  }
  return [...names].sort().slice(0, MAX_ACCOUNTS);
}

/**
 * Creates the controller accounts that are missing in kube-system; returns
 * the names it created (an account made meanwhile by someone else is not
 * one of them) and those whose creation failed, each with its reason (a
 * busy apiserver times some out; the controller-manager makes those itself).
 */
export async function reconcileControllerAccounts(server: string, pki: KubernetesPKI): Promise<{ created: string[]; failed: string[] }> {
  const k8s = await import("@kubernetes/client-node");
  const configuration = clientConfiguration(k8s, server, { ca: pki.ca.certificate, certificate: pki.admin.certificate, privateKey: pki.admin.privateKey });
  const rbac = new k8s.RbacAuthorizationV1Api(configuration);
  const core = new k8s.CoreV1Api(configuration);
  const namespace = CONTROLLER_ACCOUNTS_NAMESPACE;
  const [bindings, accounts] = await Promise.all([rbac.listClusterRoleBinding({ labelSelector: BOOTSTRAP_SELECTOR }), core.listNamespacedServiceAccount({ namespace })]);
  const present = new Set(accounts.items.map((a) => a.metadata?.name));
  const missing = controllerAccountNames(bindings.items).filter((name) => !present.has(name));
  const created: string[] = [];
  const failed: string[] = [];
  const next = missing[Symbol.iterator]();
  const worker = async () => {
    for (let step = next.next(); !step.done; step = next.next()) {
      const name = step.value;
      try {
        await core.createNamespacedServiceAccount({ namespace, body: { apiVersion: "v1", kind: "ServiceAccount", metadata: { name, namespace } } });
        created.push(name);
      } catch (error) {
        if (statusOf(error) !== 409) failed.push(`${name}: ${(error as Error).message.split("\n")[0]!.slice(0, 200)}`);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(CONCURRENCY, missing.length) }, worker));
  return { created: created.sort(), failed: failed.sort() };
}
