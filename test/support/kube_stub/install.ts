// Puts the stand-in where a node looks for the Kubernetes binaries: one
// small shell script per component in `binDir`, each running main.ts with
// this bun. Tests only; image/ never calls this.

import { chmodSync, mkdirSync, readdirSync, symlinkSync, writeFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { systemTree } from "../../../internal/testing/mod.ts";
import { COMPONENTS } from "./flags.ts";

const MAIN = resolve(import.meta.dir, "main.ts");

/** Writes the wrappers; `record` (a file) receives the stand-in's JSON-lines record. */
export function installKubeStub(binDir: string, options: { record?: string } = {}): string[] {
  mkdirSync(binDir, { recursive: true });
  return COMPONENTS.map((component) => {
    const path = join(binDir, component);
    const env = options.record ? `KUBE_STUB_RECORD='${options.record}' ` : "";
    writeFileSync(path, `#!/bin/sh\n# kube-stub: a test stand-in for ${component}, not the real binary.\n${env}exec '${process.execPath}' '${MAIN}' ${component} "$@"\n`);
    chmodSync(path, 0o755);
    return path;
  });
}

/**
 * A system tree at `dest` that is the built one (out/system: etcd, the
 * runtime, the images) except for its Kubernetes binaries, which are the
 * stand-in's. For what the real binaries cannot show in a node process
 * (a kubelet needs a machine of its own: see the README).
 */
export function stubSystemTree(dest: string, options: { record?: string } = {}): string {
  const tree = systemTree();
  mkdirSync(dest, { recursive: true });
  for (const entry of readdirSync(tree)) if (entry !== "kubernetes") symlinkSync(join(tree, entry), join(dest, entry));
  installKubeStub(join(dest, "kubernetes", "bin"), options);
  return dest;
}

export interface StubRecord {
  component: string;
  at: number;
  event: "started" | "checked" | "refused" | "etcd-healthy" | "serving" | "apiserver-ready" | "registered" | "request" | "stopped";
  [key: string]: unknown;
}

export async function readStubRecord(path: string): Promise<StubRecord[]> {
  const file = Bun.file(path);
  if (!(await file.exists())) return [];
  return (await file.text())
    .split("\n")
    .filter(Boolean)
    .map((line) => JSON.parse(line) as StubRecord);
}
