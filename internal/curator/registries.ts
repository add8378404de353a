// The cluster's container registry configuration: how workers pull images
// from each registry host (mirrors, CA, verification, credentials). The
// owner writes it through Management; workers follow it through
// Curator.WatchContainerRegistries and turn it into containerd's hosts.toml
// and their kubelet's credentials (internal/kubernetes/registries.ts).
//
//   ctl cluster registry set|login|logout|remove ──▶ Management (owner, leader,
//        fenced compare-and-swap of /nodecore/settings/registries, audited
//        with the secrets left out)
//   ctl cluster registry list ◀── Management.ListContainerRegistries (any
//        curator, from memory; never a password)
//   worker ◀── Curator.WatchContainerRegistries: everything, credentials too,
//        now and at each change; only while the caller holds the
//        kubernetes-worker role (followed through the node records' watch hub)
//
// Invariants:
//  - What is stored passed registryProblem (internal/containerd): containerd
//    can take every entry, and a bad entry never reaches a worker.
//  - A password leaves the curator only in a watch to a worker; listings,
//    logs and the audit trail carry whether there is one, never what it is.

import { create, toBinary } from "@bufbuild/protobuf";
import { createHash } from "node:crypto";
import type { Watcher } from "etcd3";
import { ContainerRegistrySchema, type ContainerRegistry } from "../../proto/gen/common/common_pb.ts";
import { ContainerRegistryShownSchema, type ContainerRegistryShown, type Management } from "../../proto/gen/api/management_pb.ts";
import { ContainerRegistriesSchema, type ContainerRegistries, type Curator } from "../../proto/gen/curator/curator_pb.ts";
import { credentialsProblem, MAX_REGISTRIES, parseCaPem, registryHostProblem, registryProblem } from "../containerd/mod.ts";
import type { Logger } from "../log/mod.ts";
import { InvalidArgumentError, NotFoundError, PermissionDeniedError, ResourceExhaustedError, UnavailableError, type ServiceImpl } from "../rpc/mod.ts";
import type { StateReader } from "./state_cache.ts";
import { REGISTRIES_KEY, type CuratorStore } from "./store.ts";
import type { NodeWatchHub } from "./watch.ts";

/** Workers one curator follows at once (one stream per worker). */
export const MAX_REGISTRY_WATCHERS = 2_000;

export interface RegistryDeps {
  store: CuratorStore;
  /** The node records' watch hub (only the Curator service's watch uses it). */
  watches?: NodeWatchHub;
  state: StateReader;
  requireLeader: () => void;
  logger: Logger;
}

/** An entry as the owner may see it: everything but the password. */
export function shownRegistry(registry: ContainerRegistry): ContainerRegistryShown {
  const certificates = registry.caPem ? parseCaPem(registry.caPem) : [];
  const ca =
    typeof certificates === "string"
      ? `(unreadable: ${certificates})`
      : certificates.map((c) => `${c.subject.replace(/\n/g, ", ")} sha256:${createHash("sha256").update(c.raw).digest("hex")}`).join("\n");
  return create(ContainerRegistryShownSchema, {
    host: registry.host,
    mirrors: registry.mirrors,
    upstreamDisabled: registry.upstreamDisabled,
    ca,
    skipVerify: registry.skipVerify,
    username: registry.credentials?.username ?? "",
    hasCredentials: registry.credentials !== undefined,
    peersDisabled: registry.peersDisabled,
  });
}

/** A host named in a request: a registry host, or INVALID_ARGUMENT. */
function checkHost(field: string, host: string): void {
  const problem = registryHostProblem(host);
  if (problem) throw new InvalidArgumentError(`${field}: ${problem}`);
}

function noEntry(host: string): NotFoundError {
  return new NotFoundError(`no registry entry for ${host}; set one first (ctl cluster registry set ${host})`);
}

/** What a log line may say about an entry. */
function logged(registry: ContainerRegistry): Record<string, unknown> {
  return {
    host: registry.host,
    mirrors: registry.mirrors.length,
    upstream: !registry.upstreamDisabled,
    ca: registry.caPem !== "",
    skipVerify: registry.skipVerify,
    credentials: registry.credentials !== undefined,
  };
}

type RegistryMethods = "setContainerRegistry" | "setContainerRegistryCredentials" | "removeContainerRegistry" | "listContainerRegistries";

/** Management's registry calls. */
export function registryManagement(deps: RegistryDeps): Pick<ServiceImpl<typeof Management>, RegistryMethods> {
  const { store, state, logger } = deps;
  return {
    async setContainerRegistry(request, ctx) {
      const registry = request.registry;
      if (!registry) throw new InvalidArgumentError("registry is missing");
      const problem = registryProblem(registry);
      if (problem) throw new InvalidArgumentError(`registry.${problem}`);
      deps.requireLeader();
      const entry = create(ContainerRegistrySchema, registry);
      await store.updateRegistries((registries) => {
        const others = registries.filter((r) => r.host !== entry.host);
        if (others.length === registries.length && registries.length >= MAX_REGISTRIES) {
          throw new ResourceExhaustedError(`the cluster has ${registries.length} registry entries, the most it keeps; remove one first`);
        }
        return [...others, entry];
      }, ctx.signal);
      logger.info("registry entry set", logged(entry));
      return {};
    },

    async setContainerRegistryCredentials(request, ctx) {
      checkHost("host", request.host);
      if (request.credentials) {
        const problem = credentialsProblem(request.credentials);
        if (problem) throw new InvalidArgumentError(`credentials.${problem}`);
      }
      deps.requireLeader();
      await store.updateRegistries((registries) => {
        const entry = registries.find((r) => r.host === request.host);
        if (!entry) throw noEntry(request.host);
        entry.credentials = request.credentials;
        return registries;
      }, ctx.signal);
      logger.info(request.credentials ? "registry credentials set" : "registry credentials removed", { host: request.host });
      return {};
    },

    async removeContainerRegistry(request, ctx) {
      checkHost("host", request.host);
      deps.requireLeader();
      await store.updateRegistries((registries) => {
        if (!registries.some((r) => r.host === request.host)) throw noEntry(request.host);
        return registries.filter((r) => r.host !== request.host);
      }, ctx.signal);
      logger.info("registry entry removed", { host: request.host });
      return {};
    },

    async listContainerRegistries(_request, ctx) {
      return { registries: (await state.read(ctx.signal)).registries().map(shownRegistry) };
    },
  };
}

/** Wakes a waiting loop; remembers a wake that came while nobody waited. */
class Bell {
  #rung = false;
  #wake: (() => void) | undefined;
  ring(): void {
    this.#rung = true;
    this.#wake?.();
  }
  async wait(signal: AbortSignal): Promise<void> {
    if (!this.#rung && !signal.aborted) {
      let onAbort: (() => void) | undefined;
      try {
        await new Promise<void>((resolve) => {
          this.#wake = resolve;
          onAbort = resolve;
          signal.addEventListener("abort", onAbort, { once: true });
        });
      } finally {
        if (onAbort) signal.removeEventListener("abort", onAbort);
      }
    }
    this.#wake = undefined;
    this.#rung = false;
  }
}

/**
 * Calls `ended` once node `nodeId`'s record no longer holds the
 * kubernetes-worker role (deleted records included), or with the hub's
 * error if it can no longer tell; returns when `signal` aborts.
 */
async function followRole(watches: NodeWatchHub, nodeId: string, signal: AbortSignal, ended: (err: Error) => void): Promise<void> {
  try {
    for await (const event of watches.subscribe({ nodeId }, signal)) {
      if (event.kind === "backlog-end") continue;
      const record = event.kind === "backlog" ? event.nodes[0] : event.kind === "put" ? event.node : undefined;
      if (!record?.roles?.kubernetesWorker) return ended(new PermissionDeniedError(`node ${nodeId} no longer holds the kubernetes-worker role`));
    }
  } catch (err) {
    if (!signal.aborted) ended(err as Error);
  }
}

/** Curator's registry watch. */
export function registryWatch(deps: RegistryDeps & { watches: NodeWatchHub }): Pick<ServiceImpl<typeof Curator>, "watchContainerRegistries"> {
  let watchers = 0;
  return {
    async *watchContainerRegistries(_request, ctx) {
      if (ctx.peer.kind !== "node") throw new Error("unreachable: policy is node");
      const nodeId = ctx.peer.nodeId;
      const worker = (snapshot: Awaited<ReturnType<StateReader["read"]>>) => Boolean(snapshot.node(nodeId)?.roles?.kubernetesWorker);
      // The caller before anything else: a node without the role learns nothing, not even whether the bound is reached.
      if (!worker(await deps.state.read(ctx.signal))) {
        throw new PermissionDeniedError(`node ${nodeId} does not hold the kubernetes-worker role; only workers pull images`);
      }
      if (watchers >= MAX_REGISTRY_WATCHERS) throw new ResourceExhaustedError(`this curator already serves ${MAX_REGISTRY_WATCHERS} registry watches; try another curator, or later`);
      watchers++;
      const bell = new Bell();
      let failure: Error | undefined;
      let watcher: Watcher | undefined;
      // Ends the role's follower when the stream ends, whichever way.
      const following = new AbortController();
      try {
        // The watch goes on before the first read: no change between the read and the watch is missed.
        watcher = await deps.store.etcd.watch().key(REGISTRIES_KEY).create();
        watcher.on("put", () => bell.ring());
        watcher.on("delete", () => bell.ring());
        const end = (why: string) => {
          failure ??= new UnavailableError(`the curator lost its etcd watch: ${why}; watch again`);
          bell.ring();
        };
        watcher.on("error", (err: Error) => end(err.message));
        watcher.on("disconnected", (err: Error) => end(`interrupted (${err.message})`));
        // The caller's record, from the curator's one watch of the node records (watch.ts), as the rights guard follows it (rights.ts).
        void followRole(deps.watches, nodeId, following.signal, (err) => {
          failure ??= err;
          bell.ring();
        });
        let sent: Buffer | undefined;
        for (;;) {
          const snapshot = await deps.state.read(ctx.signal);
          // Rights end when they are revoked, open streams included.
          if (!worker(snapshot)) throw new PermissionDeniedError(`node ${nodeId} no longer holds the kubernetes-worker role`);
          const message: ContainerRegistries = create(ContainerRegistriesSchema, { registries: [...snapshot.registries()] });
          const bytes = Buffer.from(toBinary(ContainerRegistriesSchema, message));
          if (!sent || !bytes.equals(sent)) {
            sent = bytes;
            yield message;
          }
          await bell.wait(ctx.signal);
          if (failure) throw failure;
          if (ctx.signal.aborted) return;
        }
      } finally {
        watchers--;
        following.abort();
        await watcher?.cancel().catch(() => {});
      }
    },
  };
}
