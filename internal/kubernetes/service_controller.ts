// The Kubernetes controller on one node: kube-apiserver against the local
// etcd member, then kube-controller-manager and kube-scheduler once the
// apiserver says it is ready. Each is a supervised child process (restart
// with backoff, SIGTERM then SIGKILL) and reports its own status line.
//
//   controllerService
//     ├── ensureKubernetesPKI (etcd), then this node's files on tmpfs
//     ├── kube-apiserver            healthy = GET /readyz answers "ok" (as ADMIN_USER)
//     ├── reconciler                once the apiserver was ready: the base RBAC bindings
//     │                             (the owner's among them) and the storage objects, all at once,
//     │                             then, paced (reconcile_pace.ts): Nodes, cluster DNS,
//     │                             and volumes of nodes that are gone (volumes_controller.ts)
//     ├── kube-controller-manager   started once the apiserver was ready
//     ├── kube-scheduler            started once the apiserver was ready
//     └── metrics-server            started once the reconciler's first pass made
//                                   its access; once it serves, the reconciler
//                                   makes its route (metrics_server.ts) and keeps
//                                   it with the controllers' addresses
//
// Once the apiserver is ready, at each of its starts, the OpenAPI documents
// kubectl validates against are asked for, so that the apiserver builds
// them then and not on a user's first apply (openapi_warm.ts); the first
// time, after the base objects (or BASE_FIRST_MS), since building the
// largest document keeps a TCG apiserver busy for a minute and the owner's
// access matters more.
//
// Status lines: "kube-apiserver", "kube-controller-manager",
// "kube-scheduler", "metrics-server": waiting (for what), starting, running, restarting
// (with how many starts and the last failure).

import type { X509Certificate } from "node:crypto";
import { Value } from "../event/mod.ts";
import { sleep, untilCancelled, type RunContext, type Runnable } from "../supervisor/mod.ts";
import { component, untilOk, type ComponentState } from "./component.ts";
import { controllerFiles, writeControllerFiles } from "./controller_files.ts";
import {
  APISERVER_PORT,
  CONTROLLER_MANAGER_PORT,
  SCHEDULER_PORT,
  apiserverArgs,
  controllerManagerArgs,
  controllerMetricsServerArgs,
  schedulerArgs,
  type ControllerFlagOptions,
} from "./controller_flags.ts";
import { METRICS_SERVER_PORT, reconcileMetricsAccess, reconcileMetricsRoute } from "./metrics_server.ts";
import { reconcileControllerAccounts } from "./controller_accounts.ts";
import { warmOpenApi } from "./openapi_warm.ts";
import { ensureKubernetesPKI, type Credential, type KubernetesKeys } from "./pki.ts";
import { RECONCILE_TICK_MS, ReconcilePace, recordsKey } from "./reconcile_pace.ts";
import { reconcile, reconcileDns, reconcileNodes, reconcileStorage } from "./reconciler.ts";
import { sweepVolumes, volumesController } from "./volumes_controller.ts";
import { manifestDigest, reconcileManifests, type ManifestOutcome } from "./manifests.ts";

/** The controller's components: each a binary of that name, and a status line. */
export const CONTROLLER_COMPONENTS = ["kube-apiserver", "kube-controller-manager", "kube-scheduler", "metrics-server"] as const;

/** How long the OpenAPI warm-up waits for the base objects' first pass before it goes anyway. */
export const BASE_FIRST_MS = 60_000;

export interface ControllerServiceOptions {
  /** Kubernetes' key space of the local etcd member: the PKI is read (or created) there. */
  etcd: KubernetesKeys;
  /** The apiserver's own client of that member. */
  etcdAccess: { url: string; ca: X509Certificate; client: Credential };
  /** The node's address: the components listen on it. */
  address: string;
  /** Where the Kubernetes binaries are. */
  binDir: string;
  /** A tmpfs directory for the components' files. */
  dir: string;
  /** Each component's status line. */
  report: (component: string, state: ComponentState, message: string) => void;
  /**
   * The cluster's records now: `workers` and `controllers`, the nodes
   * that hold the kubernetes-worker and kubernetes-controller roles (node
   * ID → address); `known`, every node ID.
   */
  records: () => Promise<{ workers: ReadonlyMap<string, string>; controllers: ReadonlyMap<string, string>; known: ReadonlySet<string> }>;
  /** The owner's add-on manifests now (manifests.ts), as the curator stores them; and this node's ID, which their status names. */
  manifests?: { stored: () => Promise<readonly { name: string; objectsJson: string }[]>; nodeId: string };
}

/** How often manifests that failed are applied again while nothing changes. */
export const MANIFEST_RETRY_MS = 30_000;

export function controllerService(options: ControllerServiceOptions): Runnable {
  return async (ctx) => {
    for (const name of CONTROLLER_COMPONENTS) options.report(name, "waiting", "for the Kubernetes PKI");
    const { pki, created } = await ensureKubernetesPKI(options.etcd);
    ctx.logger.info(created ? "created the Kubernetes PKI in etcd" : "read the Kubernetes PKI from etcd");
    const url = `https://${options.address}:${APISERVER_PORT}`;
    const healthy = (name: string, healthUrl: string) => async (signal: AbortSignal) => {
      await untilOk(healthUrl, { ca: pki.ca.certificate, client: pki.admin }, signal);
      ctx.logger.info(`${name} is ready`, { url: healthUrl });
    };
    writeControllerFiles(options.dir, controllerFiles(pki, { address: options.address, apiserverUrl: url, etcd: { ca: options.etcdAccess.ca, client: options.etcdAccess.client } }));
    const flags: ControllerFlagOptions = { dir: options.dir, address: options.address, etcdUrl: options.etcdAccess.url };

    // Set once: the controller-manager and scheduler tolerate an apiserver
    // that goes away later, as they do in any cluster.
    const wasReady = new Value<boolean>();
    wasReady.set(false);
    // Set once the base objects were first reconciled: the OpenAPI warm-up
    // waits for it (or for BASE_FIRST_MS), so that the owner's binding is
    // not queued behind the apiserver's build of its largest document.
    const baseReconciled = new Value<boolean>();
    baseReconciled.set(false);
    // The Metrics API in two steps (metrics_server.ts): metrics-server starts
    // once its access is made (without it, it panics at its start and prints
    // its whole usage, at every try of the supervisor's backoff), and the
    // route to it (its APIService) is made once it serves.
    const metricsAccess = new Value<boolean>();
    metricsAccess.set(false);
    const metricsServing = new Value<boolean>();
    metricsServing.set(false);
    for (const name of ["kube-controller-manager", "kube-scheduler", "metrics-server"]) options.report(name, "waiting", "for kube-apiserver to be ready");
    ctx.run(
      "apiserver",
      component(options, "kube-apiserver", apiserverArgs(flags), {
        ready: async (signal) => {
          await healthy("kube-apiserver", `${url}/readyz`)(signal);
          wasReady.set(true);
          // In the background, at every start, after the base objects: nothing waits on it (openapi_warm.ts).
          void baseReconciled
            .waitFor((r) => r, { signal: AbortSignal.any([signal, AbortSignal.timeout(BASE_FIRST_MS)]) })
            .catch(() => {})
            .then(() => (signal.aborted ? undefined : warmOpenApi(url, { ca: pki.ca.certificate, client: pki.admin }, signal, ctx.logger)))
            .catch(() => {});
        },
      }),
    );
    const afterApiserver = async (c: RunContext) => {
      await wasReady.waitFor((r) => r, { signal: c.signal });
    };
    // The cluster's base objects, once the apiserver is ready; a failure is a
    // death, retried with the supervisor's backoff.
    ctx.run("reconciler", async (c) => {
      await wasReady.waitFor((r) => r, { signal: c.signal });
      const started = performance.now();
      // The controller accounts only save the controller-manager its own
      // slow creations (controller_accounts.ts): nothing waits for them (in
      // the pass, they held metrics-server and the OpenAPI warm-up back by
      // about 20 s), and a failure is told, not a death. A creation still
      // in flight when the supervisor tries again is harmless: a second
      // one is refused as existing, and taken as made.
      void reconcileControllerAccounts(url, pki).then(
        ({ created, failed }) => {
          if (created.length > 0) c.logger.info("made the controller-manager's service accounts ahead of it", { accounts: created.length });
          if (failed.length > 0) c.logger.warn("some of the controller-manager's accounts were not made ahead of it; it makes those itself", { failed: failed.length, first: failed[0] });
        },
        (error: unknown) => c.logger.warn("the controller-manager's accounts were not made ahead of it; it makes them itself, more slowly", { error: (error as Error).message }),
      );
      // At once: the bindings (the owner's access) and the storage objects are
      // independent. Both are waited for before a failure is told, as
      // reconcile() does with its own chains, so that no request of this pass
      // still runs when the supervisor tries again.
      const [base, stored, access] = await Promise.allSettled([reconcile(url, pki), reconcileStorage(url, pki), reconcileMetricsAccess(url, pki)]);
      if (base.status === "rejected") throw base.reason;
      if (stored.status === "rejected") throw stored.reason;
      if (access.status === "rejected") throw access.reason;
      const [actions, storage] = [base.value, stored.value];
      baseReconciled.set(true);
      metricsAccess.set(true);
      c.logger.info("base objects reconciled", { ...actions, seconds: ((performance.now() - started) / 1000).toFixed(1) });
      if (storage.length > 0) c.logger.info("storage objects reconciled", { changes: storage.join("; ") });
      if (access.value.length > 0) c.logger.info("metrics-server's access reconciled", { changes: access.value.join("; ") });
      c.signalHealthy();
      const volumes = await volumesController(url, { ca: pki.ca.certificate, certificate: pki.admin.certificate, privateKey: pki.admin.privateKey }, c.logger);
      // Paced, and a failed pass is tried again, not a death (reconcile_pace.ts).
      const pace = new ReconcilePace();
      // The add-on manifests: applied at this start, at each change, and again while one fails.
      let manifests: { key: string; outcomes: ManifestOutcome[]; atMs: number; unwritten: boolean } | undefined;
      const admin = { ca: pki.ca.certificate, certificate: pki.admin.certificate, privateKey: pki.admin.privateKey };
      for (;;) {
        try {
          const { workers, controllers, known } = await options.records();
          // metrics-server's first answer is a change too: its route is made then.
          const serving = metricsServing.peek() === true;
          const key = `${recordsKey({ workers, controllers, known })} metrics-server ${serving ? "serving" : "not yet"}`;
          if (pace.due(key, Date.now())) {
            const { deleted, uncordoned } = await reconcileNodes(url, pki, new Set(workers.keys()));
            if (deleted.length > 0) c.logger.info("deleted the Node objects of nodes without the kubernetes-worker role", { nodes: deleted.join(",") });
            if (uncordoned.length > 0) c.logger.info("uncordoned the Nodes that ctl node poweroff cordoned, now that they are back and Ready", { nodes: uncordoned.join(",") });
            const dns = await reconcileDns(url, pki, workers);
            if (dns.length > 0) c.logger.info("cluster DNS objects changed", { changes: dns.join("; ") });
            if (serving) {
              const metrics = await reconcileMetricsRoute(url, pki, controllers);
              if (metrics.length > 0) c.logger.info("Metrics API objects changed", { changes: metrics.join("; ") });
            }
            const swept = await sweepVolumes(volumes, { known, workers: new Set(workers.keys()) }, c.logger);
            const ended = pace.passed(key, Date.now(), swept.watching > 0);
            if (ended > 0) c.logger.info("a reconcile pass went through again", { failedPasses: ended });
          }
          if (options.manifests) {
            const stored = await options.manifests.stored();
            const key = stored.map((m) => `${m.name}:${manifestDigest(m.objectsJson)}`).join(" ");
            const retry = manifests !== undefined && (manifests.unwritten || manifests.outcomes.some((o) => o.error)) && Date.now() - manifests.atMs >= MANIFEST_RETRY_MS;
            if (!manifests || manifests.key !== key || retry) {
              try {
                const outcomes = await reconcileManifests(url, admin, stored, options.manifests.nodeId, manifests?.outcomes);
                const failed = outcomes.filter((o) => o.error);
                if (manifests?.key !== key || failed.length > 0) {
                  const fields = { manifests: outcomes.length, failed: failed.length, ...(failed[0] ? { first: `${failed[0].name}: ${failed[0].error}` } : {}) };
                  if (failed.length > 0) c.logger.warn("add-on manifests applied, some refused", fields);
                  else c.logger.info("add-on manifests applied", fields);
                }
                manifests = { key, outcomes, atMs: Date.now(), unwritten: false };
              } catch (err) {
                // Their status could not be written: tried again in a while, and the rest of the pass goes on.
                c.logger.warn("the add-on manifests' status could not be written; trying again later", { error: (err as Error).message, nextInMs: MANIFEST_RETRY_MS });
                manifests = { key, outcomes: manifests?.outcomes ?? [], atMs: Date.now(), unwritten: true };
              }
            }
          }
        } catch (err) {
          if (c.signal.aborted) throw err;
          const wait = pace.failed(Date.now());
          c.logger.warn("a reconcile pass failed; trying again later", { error: (err as Error).message, failedPasses: pace.failures, nextInMs: wait });
          await sleep(wait, c.signal);
          continue;
        }
        await sleep(RECONCILE_TICK_MS, c.signal);
      }
    });
    ctx.run(
      "controller-manager",
      component(options, "kube-controller-manager", controllerManagerArgs(flags), {
        after: afterApiserver,
        ready: healthy("kube-controller-manager", `https://${options.address}:${CONTROLLER_MANAGER_PORT}/healthz`),
      }),
    );
    ctx.run(
      "scheduler",
      component(options, "kube-scheduler", schedulerArgs(flags), {
        after: afterApiserver,
        ready: healthy("kube-scheduler", `https://${options.address}:${SCHEDULER_PORT}/healthz`),
      }),
    );
    ctx.run(
      "metrics-server",
      component(options, "metrics-server", controllerMetricsServerArgs(flags), {
        after: async (c) => {
          await afterApiserver(c);
          if (!metricsAccess.peek()) options.report("metrics-server", "waiting", "for its access to be made (the reconciler)");
          await metricsAccess.waitFor((made) => made, { signal: c.signal });
        },
        // Serving: it listens once its informers have synced. /readyz would
        // wait for two scrapes too, and no kubelet may run yet.
        ready: async (signal) => {
          await healthy("metrics-server", `https://${options.address}:${METRICS_SERVER_PORT}/livez`)(signal);
          metricsServing.set(true);
        },
      }),
    );
    ctx.signalHealthy();
    await untilCancelled(ctx.signal);
  };
}
