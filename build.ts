// The one build entry: `bun run build`.
//
//   proto/*.proto ──buf generate (local protoc-gen-es)──▶ proto/gen/
//   cmd/init/main.ts ──Bun.build --compile──▶ out/init   (the node's PID 1)
//   cmd/ctl/main.ts  ──Bun.build --compile──▶ out/ctl    (the operator CLI)
//   image/upstream/  ──go build (cached by version)──▶ out/system
//                    etcd, containerd, runc, CNI plugins and Kubernetes,
//                    from their Go modules (image/upstream/mod.ts), and
//                    the container images (image/oci.ts, image/pause.c)
//
// Nothing is downloaded: buf and protoc-gen-es come from node_modules, and
// the executables embed bun from node_modules (@oven/bun-linux-x64).
//
// Compiling itself (and etcd3's protos inlined into the bundle) is
// image/compile.ts.

import { $ } from "bun";
import { mkdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import pkg from "./package.json";
import { BINARIES, compile } from "./image/compile.ts";
import { buildUpstream, stageSystemTree, UpstreamBuildError, type ExtraFile } from "./image/upstream/mod.ts";
import { busyboxImage, HOST_BUSYBOX, pauseImage, readBusybox } from "./image/oci.ts";
import { DEFAULT_SYSTEM_TREE } from "./image/layout.ts";
import { PROBE_IMAGE_PATH, PUBLIC_CA_BUNDLE, SANDBOX_IMAGE_PATH } from "./internal/containerd/mod.ts";
import { KUBELET_TOOLS, KUBELET_TOOLS_DIR } from "./internal/kubernetes/mod.ts";

const ROOT = import.meta.dir;
const OUT = join(ROOT, "out");
const BIN = join(ROOT, "node_modules", ".bin");

export async function generateProtos(): Promise<void> {
  console.log("build: generating protobuf code into proto/gen/");
  await $`${join(BIN, "buf")} generate proto --template proto/buf.gen.yaml`.cwd(ROOT).env({ ...process.env, PATH: `${BIN}:${process.env.PATH}` });
}

export async function gitRevision(): Promise<string> {
  const result = await $`git rev-parse --short HEAD`.cwd(ROOT).quiet().nothrow();
  return result.exitCode === 0 ? result.stdout.toString().trim() : "unknown";
}

/** The version a plain build stamps in: package.json's, with the commit as build metadata ("0.1.0+e058e45"). */
export async function defaultVersion(): Promise<string> {
  return `${pkg.version}+${await gitRevision()}`;
}

export async function build(): Promise<void> {
  mkdirSync(OUT, { recursive: true });
  await generateProtos();
  const version = await defaultVersion();
  for (const name of Object.keys(BINARIES) as (keyof typeof BINARIES)[]) await compile(name, version);
  await buildSystemTree();
}

/** Where the upstream binaries are laid out for node processes and the image. */
export const SYSTEM_TREE = join(ROOT, DEFAULT_SYSTEM_TREE);

/**
 * The public CAs the host trusts (Debian's ca-certificates): containerd
 * verifies public registries (Docker Hub, GHCR, a mirror with a public
 * certificate) against them; a registry's own CA comes from the cluster's
 * registry configuration (ctl cluster registry set --ca).
 */
const HOST_CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt";

/** The tree's files besides the upstream binaries: container images, the kubelet's mount tools, the public CAs. */
async function systemExtras(): Promise<ExtraFile[]> {
  const pause = join(OUT, "pause");
  const compiled = await $`gcc -static -Os -s -Wall -Wextra -Werror -o ${pause} ${join(ROOT, "image", "pause.c")}`.quiet().nothrow();
  if (compiled.exitCode !== 0) throw new Error(`compiling image/pause.c failed: ${compiled.stderr.toString().trim().split("\n").at(-1)}`);
  const busybox = readBusybox(HOST_BUSYBOX);
  return [
    { path: PROBE_IMAGE_PATH.slice(1), contents: busyboxImage(busybox), mode: 0o644 },
    { path: SANDBOX_IMAGE_PATH.slice(1), contents: pauseImage(readFileSync(pause)), mode: 0o644 },
    { path: `${KUBELET_TOOLS_DIR.slice(1)}/busybox`, contents: busybox, mode: 0o755 },
    ...KUBELET_TOOLS.map((tool) => ({ path: `${KUBELET_TOOLS_DIR.slice(1)}/${tool}`, contents: { link: "busybox" }, mode: 0o777 })),
    { path: PUBLIC_CA_BUNDLE.slice(1), contents: readCaBundle(), mode: 0o644 },
  ];
}

function readCaBundle(): Uint8Array {
  try {
    return readFileSync(HOST_CA_BUNDLE);
  } catch (error) {
    throw new Error(`could not read ${HOST_CA_BUNDLE}, the public CAs containerd trusts (Debian package ca-certificates): ${(error as Error).message}`);
  }
}

/** Builds (or finds in the cache) the upstream components and lays them out in out/system. */
export async function buildSystemTree(): Promise<string> {
  const dirs = await buildUpstream((line) => console.log(`build: ${line}`));
  stageSystemTree(dirs, SYSTEM_TREE, await systemExtras());
  console.log("build: out/system laid out");
  return SYSTEM_TREE;
}

if (import.meta.main) {
  try {
    await build();
  } catch (error) {
    // One line naming the cause; the upstream build's errors already name the component, version and step.
    console.error(`build: ${error instanceof UpstreamBuildError ? error.message : (error as Error).message.split("\n")[0]}`);
    process.exit(1);
  }
}
