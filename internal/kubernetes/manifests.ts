// Add-on manifests: Kubernetes objects the owner stores in the cluster, and
// every controller applies with server-side apply (as k3s applies its
// manifests directory, and Talos its inline manifests).
//
//   ctl cluster manifests apply <file|dir> ──(parsed, checked: manifestProblem)──▶
//     Management.ApplyManifest (owner; the curator checks again, stores it
//     under settings/manifests, leader-fenced) ──▶ the controller's
//     reconciler reads them from its local etcd member (curator/reader.ts)
//     ──▶ server-side apply of each object, as field manager
//     nodecore-manifests, forced ──▶ ConfigMap kube-system/nodecore-manifests
//     (each manifest's digest and outcome) and, for one that failed, a
//     Warning event on it ──▶ ctl cluster health's "manifests" check
//
// They are applied at every start of a controller's reconciler, at every
// change, and again while one fails. One that fails never blocks the
// others. Deleting a manifest forgets it; its objects stay (as `kubectl
// apply` never deletes what it no longer names).
//
// Bounds: MAX_MANIFESTS manifests, each at most MAX_MANIFEST_BYTES of JSON
// and MAX_MANIFEST_OBJECTS objects. A manifest may hold a Secret: listings,
// logs, the status and the events name objects, never what they hold.

import { createHash } from "node:crypto";
import { clientConfiguration, type ClientIdentity } from "./api_client.ts";

export const MAX_MANIFESTS = 64;
export const MAX_MANIFEST_BYTES = 256 * 1024;
export const MAX_MANIFEST_OBJECTS = 200;
/** The one etcd write that stores them all stays under etcd's 1.5 MiB request limit. */
export const MAX_MANIFESTS_RECORD_BYTES = 1024 * 1024;

export const MANIFEST_FIELD_MANAGER = "nodecore-manifests";
export const MANIFESTS_STATUS = { namespace: "kube-system", name: "nodecore-manifests" } as const;

const NAME = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/;
const KIND = /^[A-Z][A-Za-z0-9]{0,62}$/;
const API_VERSION = /^([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?\/)?v[0-9]+((alpha|beta)[0-9]+)?$/;
const OBJECT_NAME = /^[a-z0-9]([-a-z0-9.:]{0,251}[a-z0-9])?$/;

/** One object of a manifest, as much of it as is checked. */
export interface ManifestObject {
  apiVersion: string;
  kind: string;
  metadata: { name: string; namespace?: string; [field: string]: unknown };
  [field: string]: unknown;
}

/** What a listing or a log may say of an object. */
export function objectLabel(o: ManifestObject): string {
  return o.metadata.namespace ? `${o.kind} ${o.metadata.namespace}/${o.metadata.name}` : `${o.kind} ${o.metadata.name}`;
}

/** Why `name` is no manifest name, or undefined. */
export function manifestNameProblem(name: string): string | undefined {
  if (!NAME.test(name)) return `${JSON.stringify(name.slice(0, 80))} is not a manifest name (a DNS label: a-z, 0-9 and "-", at most 63)`;
  return undefined;
}

/** Why object `i` cannot be applied, or undefined. */
function objectProblem(o: unknown, i: number): string | undefined {
  const at = `object ${i + 1}`;
  if (typeof o !== "object" || o === null || Array.isArray(o)) return `${at} is not an object`;
  const { apiVersion, kind, metadata } = o as Record<string, unknown>;
  if (typeof apiVersion !== "string" || !API_VERSION.test(apiVersion)) return `${at}: apiVersion ${JSON.stringify(String(apiVersion).slice(0, 80))} is not group/version or version`;
  if (typeof kind !== "string" || !KIND.test(kind)) return `${at}: kind ${JSON.stringify(String(kind).slice(0, 80))} is not a kind`;
  if (kind === "List" || kind.endsWith("List")) return `${at}: a ${kind} is not applied as one object; list its items instead`;
  if (typeof metadata !== "object" || metadata === null || Array.isArray(metadata)) return `${at} (${kind}) has no metadata`;
  const { name, namespace, generateName } = metadata as Record<string, unknown>;
  if (generateName !== undefined) return `${at} (${kind}) has metadata.generateName: server-side apply needs a name`;
  if (typeof name !== "string" || !OBJECT_NAME.test(name)) return `${at} (${kind}): metadata.name ${JSON.stringify(String(name).slice(0, 80))} is not a name`;
  if (namespace !== undefined && (typeof namespace !== "string" || !NAME.test(namespace)))
    return `${at} (${kind} ${name}): metadata.namespace ${JSON.stringify(String(namespace).slice(0, 80))} is not a namespace`;
  return undefined;
}

/**
 * The objects of a manifest's JSON, checked; or why they cannot be stored.
 * The same check runs in ctl (before anything is sent) and in the curator
 * (which trusts no client).
 */
export function parseManifestObjects(objectsJson: string): ManifestObject[] | string {
  const bytes = Buffer.byteLength(objectsJson);
  if (bytes > MAX_MANIFEST_BYTES) return `it is ${bytes} bytes of JSON, more than the ${MAX_MANIFEST_BYTES} a manifest may be; split it`;
  let parsed: unknown;
  try {
    parsed = JSON.parse(objectsJson);
  } catch (error) {
    return `its objects are not JSON: ${(error as Error).message.slice(0, 120)}`;
  }
  if (!Array.isArray(parsed)) return "its objects are not a JSON array";
  if (parsed.length === 0) return "it holds no object";
  if (parsed.length > MAX_MANIFEST_OBJECTS) return `it holds ${parsed.length} objects, more than the ${MAX_MANIFEST_OBJECTS} a manifest may; split it`;
  const seen = new Set<string>();
  for (const [i, o] of parsed.entries()) {
    const problem = objectProblem(o, i);
    if (problem) return problem;
    const object = o as ManifestObject;
    const key = `${object.apiVersion.split("/").slice(0, -1).join("/")} ${objectLabel(object)}`;
    if (seen.has(key)) return `object ${i + 1} (${objectLabel(object)}) is named twice`;
    seen.add(key);
  }
  return parsed as ManifestObject[];
}

export function manifestDigest(objectsJson: string): string {
  return createHash("sha256").update(objectsJson).digest("hex");
}

/**
 * The order objects are applied in: what others live in or are made of
 * first (namespaces, custom resource definitions, accounts and roles), then
 * the rest in the manifest's order.
 */
const FIRST_KINDS = ["Namespace", "CustomResourceDefinition", "ServiceAccount", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "ConfigMap", "Secret"];
export function applyOrder(objects: readonly ManifestObject[]): ManifestObject[] {
  const rank = (o: ManifestObject) => {
    const i = FIRST_KINDS.indexOf(o.kind);
    return i < 0 ? FIRST_KINDS.length : i;
  };
  return objects
    .map((o, i) => ({ o, i }))
    .sort((a, b) => rank(a.o) - rank(b.o) || a.i - b.i)
    .map(({ o }) => o);
}

// --- applying them (the controller's reconciler) -------------------------

/** How one manifest went: every object applied, or the first that was refused and why. */
export interface ManifestOutcome {
  name: string;
  sha256: string;
  /** Objects applied, in applyOrder. */
  applied: number;
  objects: number;
  /** The first refusal: "Kind ns/name: why" (bounded; never an object's contents). */
  error?: string;
}

/** One manifest's status as the ConfigMap keeps it (and ctl cluster health reads it). */
export interface ManifestStatus {
  sha256: string;
  applied: number;
  objects: number;
  error?: string;
  /** Which controller applied it, and when (ms since the epoch). */
  node: string;
  atMs: number;
}

/** Longest refusal kept, in characters. */
const MAX_ERROR_CHARS = 300;

/**
 * Why the apiserver refused `object`, in one line. A Secret's refusal keeps
 * only its status and reason: the apiserver's message may quote a value.
 */
export function refusalText(error: unknown, object: ManifestObject): string {
  const code = (error as { code?: unknown }).code;
  let message = (error as Error).message ?? String(error);
  let reason = "";
  const body = (error as { body?: unknown }).body;
  try {
    const status = (typeof body === "string" ? JSON.parse(body) : body) as { message?: unknown; reason?: unknown } | undefined;
    if (typeof status?.message === "string") message = status.message;
    if (typeof status?.reason === "string") reason = status.reason;
  } catch {
    // Not a Status: the error's own message.
  }
  const why = object.kind === "Secret" ? `HTTP ${typeof code === "number" ? code : "?"}${reason ? ` ${reason}` : ""}` : message;
  const line = `${objectLabel(object)}: ${why}`.replace(/\s+/g, " ");
  return line.length > MAX_ERROR_CHARS ? `${line.slice(0, MAX_ERROR_CHARS - 1)}…` : line;
}

/**
 * What applying needs of client-node's KubernetesObjectApi (a test gives a
 * stand-in): it finds each kind's resource by discovery, and puts a
 * namespaced object without a namespace in default.
 */
type ObjectApi = { patch: (spec: ManifestObject, pretty?: string, dryRun?: string, fieldManager?: string, force?: boolean, patchStrategy?: string) => Promise<unknown> };

/** Applies one manifest's objects in order, stopping at the first refusal (what follows may need it). */
export async function applyManifest(api: ObjectApi, manifest: { name: string; objectsJson: string }, serverSideApply: string): Promise<ManifestOutcome> {
  const sha256 = manifestDigest(manifest.objectsJson);
  const objects = parseManifestObjects(manifest.objectsJson);
  if (typeof objects === "string") return { name: manifest.name, sha256, applied: 0, objects: 0, error: objects };
  let applied = 0;
  for (const object of applyOrder(objects)) {
    try {
      await api.patch(object, undefined, undefined, MANIFEST_FIELD_MANAGER, true, serverSideApply);
    } catch (error) {
      return { name: manifest.name, sha256, applied, objects: objects.length, error: refusalText(error, object) };
    }
    applied++;
  }
  return { name: manifest.name, sha256, applied, objects: objects.length };
}

/** The status ConfigMap: one key per stored manifest, its outcome as JSON. */
export function manifestsStatusObject(outcomes: readonly ManifestOutcome[], node: string, atMs: number): ManifestObject {
  const data: Record<string, string> = {};
  for (const o of outcomes) {
    const status: ManifestStatus = { sha256: o.sha256, applied: o.applied, objects: o.objects, ...(o.error ? { error: o.error } : {}), node, atMs };
    data[o.name] = JSON.stringify(status);
  }
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: MANIFESTS_STATUS.name, namespace: MANIFESTS_STATUS.namespace, labels: { "app.kubernetes.io/managed-by": "nodecore" } },
    data,
  };
}

/** A status ConfigMap's data, read back; entries that do not parse are left out. */
export function parseManifestsStatus(data: Record<string, string> | undefined): Map<string, ManifestStatus> {
  const statuses = new Map<string, ManifestStatus>();
  for (const [name, text] of Object.entries(data ?? {})) {
    try {
      const s = JSON.parse(text) as ManifestStatus;
      if (typeof s.sha256 === "string") statuses.set(name, s);
    } catch {
      // Someone else's key: not ours to judge.
    }
  }
  return statuses;
}

/** The field manager of the status ConfigMap (not MANIFEST_FIELD_MANAGER: a manifest may never own it). */
const STATUS_FIELD_MANAGER = "nodecore-manifests-status";

/**
 * Applies every stored manifest as the node core's admin, each on its own
 * (one that fails blocks none of the others), then writes their outcomes to
 * the status ConfigMap, and a Warning event on it for each failure that is
 * new since `previous`. Throws only when the status cannot be written.
 */
export async function reconcileManifests(
  server: string,
  identity: ClientIdentity,
  manifests: readonly { name: string; objectsJson: string }[],
  node: string,
  previous: readonly ManifestOutcome[] = [],
): Promise<ManifestOutcome[]> {
  const k8s = await import("@kubernetes/client-node");
  const configuration = clientConfiguration(k8s, server, identity);
  const api = new k8s.KubernetesObjectApi(configuration) as unknown as ObjectApi;
  const outcomes: ManifestOutcome[] = [];
  for (const manifest of manifests) outcomes.push(await applyManifest(api, manifest, k8s.PatchStrategy.ServerSideApply));
  const now = Date.now();
  await api.patch(manifestsStatusObject(outcomes, node, now), undefined, undefined, STATUS_FIELD_MANAGER, true, k8s.PatchStrategy.ServerSideApply);
  const core = new k8s.CoreV1Api(configuration);
  const { namespace, name } = MANIFESTS_STATUS;
  for (const failed of outcomes.filter((o) => o.error && previous.find((p) => p.name === o.name)?.error !== o.error)) {
    const at = new Date(now);
    await core
      .createNamespacedEvent({
        namespace,
        body: {
          metadata: { generateName: `${name}.` },
          involvedObject: { apiVersion: "v1", kind: "ConfigMap", namespace, name },
          reason: "ManifestFailed",
          type: "Warning",
          message: `manifest ${failed.name}: ${failed.applied} of ${failed.objects} objects applied; ${failed.error}`,
          source: { component: MANIFEST_FIELD_MANAGER, host: node },
          firstTimestamp: at,
          lastTimestamp: at,
          count: 1,
        },
      })
      // The status holds the failure; an event that could not be written is no reason to apply again.
      .catch(() => undefined);
  }
  return outcomes;
}
