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
// etcd3 loads its proto/rpc.proto from disk at run time, relative to its own
// folder; a compiled binary would look for it at this machine's absolute
// node_modules path. The inlineEtcdProtos plugin parses those protos here and
// puts them into the bundle, so the binaries run without node_modules. It
// also builds etcd3's gRPC service definitions with less work than
// proto-loader: proto-loader describes every message for gRPC reflection
// (descriptors encoded at load time), which grpc-js's clients never read
// and which was most of the etcd client's load time.

import { $, type BunPlugin } from "bun";
import { mkdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import protobuf from "protobufjs";
import pkg from "./package.json";
import { buildUpstream, stageSystemTree, UpstreamBuildError, type ExtraFile } from "./image/upstream/mod.ts";
import { busyboxImage, HOST_BUSYBOX, pauseImage, readBusybox } from "./image/oci.ts";
import { DEFAULT_SYSTEM_TREE } from "./image/layout.ts";
import { PROBE_IMAGE_PATH, PUBLIC_CA_BUNDLE, SANDBOX_IMAGE_PATH } from "./internal/containerd/mod.ts";
import { KUBELET_TOOLS, KUBELET_TOOLS_DIR } from "./internal/kubernetes/mod.ts";

const ROOT = import.meta.dir;
const OUT = join(ROOT, "out");
const BIN = join(ROOT, "node_modules", ".bin");

export const BINARIES = {
  init: "cmd/init/main.ts",
  ctl: "cmd/ctl/main.ts",
} as const;

/** The etcd3 call that reads protos from disk, and what replaces it. */
const ETCD_PROTO_LOAD = "(0, proto_loader_1.loadSync)(`${__dirname}/../proto/rpc.proto`, {";

/**
 * Builds what grpc.loadPackageDefinition needs for clients from a protobufjs
 * JSON root: per service, its methods' paths, stream flags and (de)serialisers,
 * with proto-loader's semantics (fromObject/encode out; decode/toObject in,
 * with etcd3's conversion options). Message entries are left out: etcd3 uses
 * only the service constructors. Injected as JavaScript into etcd3's module.
 */
const ETCD_SERVICE_DEFINITIONS = `(function etcdServiceDefinitions(json, options) {
  const protobuf = require("protobufjs");
  const root = protobuf.Root.fromJSON(json);
  root.resolveAll();
  const definition = {};
  const visit = (namespace, prefix) => {
    for (const child of namespace.nestedArray) {
      const name = prefix ? prefix + "." + child.name : child.name;
      if (child instanceof protobuf.Service) {
        const methods = {};
        for (const method of child.methodsArray) {
          const request = method.resolvedRequestType;
          const response = method.resolvedResponseType;
          methods[method.name] = {
            path: "/" + name + "/" + method.name,
            requestStream: Boolean(method.requestStream),
            responseStream: Boolean(method.responseStream),
            requestSerialize: (value) => request.encode(request.fromObject(value)).finish(),
            requestDeserialize: (bytes) => request.toObject(request.decode(bytes), options),
            responseSerialize: (value) => response.encode(response.fromObject(value)).finish(),
            responseDeserialize: (bytes) => response.toObject(response.decode(bytes), options),
            originalName: method.name.charAt(0).toLowerCase() + method.name.slice(1),
          };
        }
        definition[name] = methods;
      } else if (child.nestedArray) {
        visit(child, name);
      }
    }
  };
  visit(root, "");
  return definition;
})`;

const inlineEtcdProtos: BunPlugin = {
  name: "inline-etcd-protos",
  setup(build) {
    build.onLoad({ filter: /etcd3[\\/]lib[\\/]connection-pool\.js$/ }, async (args) => {
      const source = await Bun.file(args.path).text();
      if (!source.includes(ETCD_PROTO_LOAD)) {
        throw new Error(`etcd3 changed how it loads its protos; update inlineEtcdProtos in build.ts (${args.path})`);
      }
      const protoFile = join(args.path, "..", "..", "proto", "rpc.proto");
      const root = new protobuf.Root().loadSync(protoFile, { keepCase: true });
      root.resolveAll();
      const json = JSON.stringify(root.toJSON());
      return {
        contents: source.replace(ETCD_PROTO_LOAD, `${ETCD_SERVICE_DEFINITIONS}(${json}, {`),
        loader: "js",
      };
    });
  },
};

export async function generateProtos(): Promise<void> {
  console.log("build: generating protobuf code into proto/gen/");
  await $`${join(BIN, "buf")} generate proto --template proto/buf.gen.yaml`.cwd(ROOT).env({ ...process.env, PATH: `${BIN}:${process.env.PATH}` });
}

export async function gitRevision(): Promise<string> {
  const result = await $`git rev-parse --short HEAD`.cwd(ROOT).quiet().nothrow();
  return result.exitCode === 0 ? result.stdout.toString().trim() : "unknown";
}

export interface CompileOptions {
  /** Where the executable goes (default: out/<name>). */
  outfile?: string;
  /** A named test fault compiled in (internal/version TEST_FAULTS): only for test builds of a deliberately broken version. */
  testFault?: string;
}

export async function compile(name: keyof typeof BINARIES, version: string, options: CompileOptions = {}): Promise<string> {
  const outfile = options.outfile ?? join(OUT, name);
  const started = performance.now();
  const result = await Bun.build({
    entrypoints: [join(ROOT, BINARIES[name])],
    compile: { outfile, autoloadDotenv: false, autoloadBunfig: false },
    target: "bun",
    format: "esm",
    minify: true,
    bytecode: true,
    sourcemap: "none",
    define: { NODECORE_VERSION: JSON.stringify(version), NODECORE_TEST_FAULT: JSON.stringify(options.testFault ?? "") },
    plugins: [inlineEtcdProtos],
  });
  if (!result.success) {
    for (const log of result.logs) console.error(log);
    throw new Error(`build: compiling ${name} failed`);
  }
  const size = Bun.file(outfile).size;
  console.log(`build: ${relative(ROOT, outfile)} ${(size / 1e6).toFixed(1)} MB in ${((performance.now() - started) / 1000).toFixed(1)} s`);
  return outfile;
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
