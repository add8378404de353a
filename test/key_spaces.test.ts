// One owner for every etcd key space (issue 49): the curator's state under
// /nodecore/ is read and written by internal/curator only (others read it
// through curator/reader.ts and report through a Curator call), and the
// Kubernetes key space (/kubernetes/: the apiserver's objects and the
// Kubernetes PKI) by internal/kubernetes only. Product code elsewhere names
// neither: not the curator's store, its prefix or its keys, not the
// Kubernetes PKI's key. Test files and fixtures may (they set up and
// inspect state).

import { expect, test } from "bun:test";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";

const ROOT = join(import.meta.dir, "..");
const TEST_ONLY = /(\.test\.ts|\/test_cluster\.ts|\/fake_curator\.ts)$/;

interface KeySpace {
  owner: string;
  /** What only its owner may name: identifiers of its store and keys, and its prefix as a literal. */
  names: RegExp;
}

const KEY_SPACES: KeySpace[] = [
  { owner: "internal/curator/", names: /\b(CuratorStore|ETCD_PREFIX|BACKUP_STATUS_KEY|BACKUP_SCHEDULE_KEY|NODES_PREFIX)\b|["'`]\/nodecore\/["'`]/ },
  { owner: "internal/kubernetes/", names: /\b(PKI_KEY|APISERVER_ETCD_PREFIX|KUBERNETES_ETCD_PREFIX)\b|["'`]\/kubernetes\/(pki|registry)?["'`]/ },
];

/**
 * Known exceptions: none since backup/restore.ts reads a snapshot through
 * the curator's decoder (curatorSnapshotState), handed in by its callers.
 * One added here must say why.
 */
const KNOWN: string[] = [];

function productFiles(dir: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (path.endsWith(".ts") && !TEST_ONLY.test(path)) out.push(path);
    }
  };
  walk(dir);
  return out;
}

test("no product code outside a key space's owner names that key space", () => {
  const found: string[] = [];
  for (const file of ["internal", "cmd", "image", "bench"].flatMap((dir) => productFiles(join(ROOT, dir)))) {
    const path = relative(ROOT, file);
    const text = readFileSync(file, "utf8");
    for (const space of KEY_SPACES) if (!path.startsWith(space.owner) && space.names.test(text)) found.push(`${path} names ${space.owner}'s key space`);
  }
  expect(found.sort()).toEqual(KNOWN);
});

test("the check sees a key space named outside its owner", () => {
  const [curator, kubernetes] = KEY_SPACES;
  expect(curator!.names.test("const store = new CuratorStore(etcd.namespace(ETCD_PREFIX));")).toBe(true);
  expect(curator!.names.test('etcd.getAll().prefix("/nodecore/")')).toBe(true);
  expect(curator!.names.test('"/usr/share/nodecore/images/pause.oci.tar"')).toBe(false);
  expect(kubernetes!.names.test('await etcd.get("/kubernetes/pki")')).toBe(true);
  expect(kubernetes!.names.test('etcd.namespace("/kubernetes/")')).toBe(true);
  expect(kubernetes!.names.test('const KUBERNETES_BIN_DIR = "/kubernetes/bin";')).toBe(false);
});
