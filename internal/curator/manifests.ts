// The owner's add-on manifests (internal/kubernetes/manifests.ts says what
// they are and how the controllers apply them): stored, replaced and
// forgotten through Management, read by the controllers from their local
// etcd member (reader.ts).
//
//   ctl cluster manifests apply|delete ──▶ Management (owner, leader, fenced
//        compare-and-swap of /nodecore/settings/manifests, audited by name)
//   ctl cluster manifests list ◀── Management.ListManifests (any curator,
//        from memory): names, objects, sizes, digests; never what they hold
//
// Invariants:
//  - What is stored passed parseManifestObjects: every object has a kind,
//    an apiVersion and a name, and a manifest is within its bounds.
//  - A manifest may hold a Secret: no listing, log or audit line carries an
//    object's contents.

import { create } from "@bufbuild/protobuf";
import { ManifestSchema, type Manifest } from "../../proto/gen/common/common_pb.ts";
import { ManifestShownSchema, type Management, type ManifestShown } from "../../proto/gen/api/management_pb.ts";
import { manifestDigest, manifestNameProblem, MAX_MANIFESTS, MAX_MANIFESTS_RECORD_BYTES, objectLabel, parseManifestObjects } from "../kubernetes/mod.ts";
import type { Logger } from "../log/mod.ts";
import { InvalidArgumentError, NotFoundError, ResourceExhaustedError, type ServiceImpl } from "../rpc/mod.ts";
import type { StateReader } from "./state_cache.ts";
import type { CuratorStore } from "./store.ts";

export interface ManifestDeps {
  store: CuratorStore;
  state: StateReader;
  requireLeader: () => void;
  logger: Logger;
}

/** A stored manifest as the owner may see it: what it names, never what it holds. */
export function shownManifest(manifest: Manifest): ManifestShown {
  const objects = parseManifestObjects(manifest.objectsJson);
  return create(ManifestShownSchema, {
    name: manifest.name,
    objects: typeof objects === "string" ? [`(unreadable: ${objects})`] : objects.map(objectLabel),
    bytes: Buffer.byteLength(manifest.objectsJson),
    sha256: manifestDigest(manifest.objectsJson),
    updatedMs: manifest.updatedMs,
  });
}

function checkName(name: string): void {
  const problem = manifestNameProblem(name);
  if (problem) throw new InvalidArgumentError(`name: ${problem}`);
}

type ManifestMethods = "applyManifest" | "deleteManifest" | "listManifests";

export function manifestManagement(deps: ManifestDeps): Pick<ServiceImpl<typeof Management>, ManifestMethods> {
  const { store, state, logger } = deps;
  return {
    async applyManifest(request, ctx) {
      const given = request.manifest;
      if (!given) throw new InvalidArgumentError("manifest is missing");
      checkName(given.name);
      const objects = parseManifestObjects(given.objectsJson);
      if (typeof objects === "string") throw new InvalidArgumentError(`manifest ${given.name}: ${objects}`);
      deps.requireLeader();
      const manifest = create(ManifestSchema, { name: given.name, objectsJson: given.objectsJson, updatedMs: BigInt(Date.now()) });
      await store.updateManifests(
        (manifests) => {
          const others = manifests.filter((m) => m.name !== manifest.name);
          if (others.length === manifests.length && manifests.length >= MAX_MANIFESTS) {
            throw new ResourceExhaustedError(`the cluster has ${manifests.length} manifests, the most it keeps; delete one first`);
          }
          return [...others, manifest];
        },
        MAX_MANIFESTS_RECORD_BYTES,
        ctx.signal,
      );
      const sha256 = manifestDigest(manifest.objectsJson);
      logger.info("add-on manifest stored", { name: manifest.name, objects: objects.length, bytes: Buffer.byteLength(manifest.objectsJson), sha256 });
      return { sha256 };
    },

    async deleteManifest(request, ctx) {
      checkName(request.name);
      deps.requireLeader();
      await store.updateManifests(
        (manifests) => {
          if (!manifests.some((m) => m.name === request.name)) throw new NotFoundError(`no manifest named ${request.name} (ctl cluster manifests list names them)`);
          return manifests.filter((m) => m.name !== request.name);
        },
        MAX_MANIFESTS_RECORD_BYTES,
        ctx.signal,
      );
      logger.info("add-on manifest deleted", { name: request.name });
      return {};
    },

    async listManifests(_request, ctx) {
      return { manifests: (await state.read(ctx.signal)).manifests().map(shownManifest) };
    },
  };
}
